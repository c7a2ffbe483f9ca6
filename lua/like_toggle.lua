-- Like or unlike in the user's liked-set and record the change, atomically, with the user's
-- rate limit in the same round trip (after the fixed_window.lua prelude).
-- KEYS[1]  liked-set of (user, course)          SET, members p:<post> / c:<comment> and `_`
-- KEYS[2]  the like stream of the set's shard    STREAM  } same hash slot as KEYS[1]:
-- KEYS[3]  the user's like rate-limit window     STRING  } the user's shard tag
-- ARGV[1]  member (p:<id> or c:<id>)
-- ARGV[2]  op: `like` or `unlike`
-- ARGV[3]  user id     ARGV[4]  course id     ARGV[5]  set TTL in milliseconds
-- ARGV[6]  toggles allowed per window (0: no limit)     ARGV[7]  window in milliseconds
-- ARGV[8]  `1` when ARGV[9..] are the set's members as PostgreSQL has them (possibly none):
--          load them, with the sentinel, if the set is missing; `0` otherwise.
-- Returns {status, retry_ms}:
--   {-1, 0}  the set is not loaded and no members were given: the caller reads them from
--            PostgreSQL and calls again with them (never guess). Nothing was counted.
--   {2, ms}  rate limited: nothing changed; ms until the window resets.
--   {0, 0}   nothing changed (a repeat).     {1, 0}  the set changed AND the event was appended.
-- Both writes happen in this one script, so a changed set always has its event.
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[8] ~= '1' then
    return {-1, 0}
  end
  redis.call('SADD', KEYS[1], '_')
  -- unpack() of thousands of values overflows Lua's stack: add in chunks.
  for i = 9, #ARGV, 1000 do
    redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
local retry = fixed_window(KEYS[3], ARGV[6], ARGV[7])
if retry > 0 then
  return {2, retry}
end
local changed
if ARGV[2] == 'like' then
  changed = redis.call('SADD', KEYS[1], ARGV[1])
else
  changed = redis.call('SREM', KEYS[1], ARGV[1])
end
if changed == 0 then
  return {0, 0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('XADD', KEYS[2], '*', 'op', ARGV[2], 't', ARGV[1], 'u', ARGV[3], 'c', ARGV[4])
return {1, 0}
