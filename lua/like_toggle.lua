-- Like or unlike in the user's liked-set and record the change, atomically.
-- KEYS[1]  liked-set of (user, course)          SET, members p:<post> / c:<comment> and `_`
-- KEYS[2]  the like stream of the set's shard    STREAM (same hash slot as KEYS[1])
-- ARGV[1]  member (p:<id> or c:<id>)
-- ARGV[2]  op: `like` or `unlike`
-- ARGV[3]  user id     ARGV[4]  course id     ARGV[5]  set TTL in milliseconds
-- Returns -1 when the set is not loaded (the caller warms it and calls again: never guess),
-- 0 when nothing changed (a repeat), 1 when the set changed AND the event was appended.
-- Both writes happen in this one script, so a changed set always has its event.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local changed
if ARGV[2] == 'like' then
  changed = redis.call('SADD', KEYS[1], ARGV[1])
else
  changed = redis.call('SREM', KEYS[1], ARGV[1])
end
if changed == 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('XADD', KEYS[2], '*', 'op', ARGV[2], 't', ARGV[1], 'u', ARGV[3], 'c', ARGV[4])
return 1
