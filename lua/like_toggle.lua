-- Like or unlike in the user's liked-set and record the change, atomically, with the user's
-- rate limit in the same round trip (after the fixed_window.lua and liked_set_load.lua preludes).
-- KEYS[1]  liked-set of (user, course)          SET, members p:<post> / c:<comment> and `_`
-- KEYS[2]  the like stream of the set's shard    STREAM
-- KEYS[3]  the user's like rate-limit window     STRING
-- KEYS[4]  pending records of (user, course)     HASH member -> `+ <entry id>` / `- <entry id>`
-- KEYS[5]  the shard's load generations          HASH bucket -> count (see liked_set_load.lua)
--          All five share the hash slot of the user's shard tag.
-- ARGV[1]  member (p:<id> or c:<id>)     ARGV[2]  `+` like or `-` unlike
-- ARGV[3]  set TTL in milliseconds
-- ARGV[4]  toggles allowed per window (0: no limit)     ARGV[5]  window in milliseconds
-- ARGV[6]  the set's generation bucket
-- ARGV[7]  the generation read before the rows in ARGV[9+n..] were read from PostgreSQL, or
--          `~<xmin>` for rows read with the memberships on a first touch, no generation read
--          before them (`xmin` of the statement's snapshot, see load_stamp.lua), or `` when no
--          rows are given
-- ARGV[8]  n, the number of stream entry fields and values that follow
-- ARGV[9 .. 8+n]  the entry's fields and values (the event codec's, passed to XADD untouched)
-- ARGV[9+n ..]    the set's members as PostgreSQL has them (possibly none), when ARGV[7] ~= ''
-- Returns {status, value}:
--   {-1, gen}  the set is not loaded and no rows were given: the caller reads them from
--              PostgreSQL after noting `gen`, and calls again. Nothing was counted.
--   {-3, gen}  rows were given but an apply moved the generation since: read them again.
--   {2, ms}    rate limited: nothing changed; ms until the window resets.
--   {0, 0}     nothing changed (a repeat).     {1, 0}  the set changed AND the event was appended.
-- The set, the stream and the pending record change in this one script, so a changed set
-- always has its event, and every event not yet applied has its record.
local fields = tonumber(ARGV[8])
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[7] == '' then
    return {-1, redis.call('HGET', KEYS[5], ARGV[6]) or '0'}
  end
  local expected = ARGV[7]
  if string.sub(expected, 1, 1) == '~' then
    -- Rows without a generation: good only if no change they may miss was retired since.
    local current = redis.call('HGET', KEYS[5], ARGV[6]) or '0'
    local stamp = redis.call('HGET', KEYS[5], 'x' .. ARGV[6])
    if stamp and tonumber(stamp) >= tonumber(string.sub(expected, 2)) then
      return {-3, current}
    end
    expected = current
  end
  local refused = load_liked_set(KEYS[1], KEYS[4], KEYS[5], ARGV[6], expected, ARGV[3], 9 + fields)
  if refused then
    return {-3, refused}
  end
end
local retry = fixed_window(KEYS[3], ARGV[4], ARGV[5])
if retry > 0 then
  return {2, retry}
end
local changed
if ARGV[2] == '+' then
  changed = redis.call('SADD', KEYS[1], ARGV[1])
else
  changed = redis.call('SREM', KEYS[1], ARGV[1])
end
if changed == 0 then
  return {0, 0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 9, 8 + fields))
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2] .. ' ' .. id)
return {1, 0}
