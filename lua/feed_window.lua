-- One read of a capped list for a feed page: its sentinel, its floor (the oldest id it is known
-- to be complete from), and up to `count` ids below a bound, newest first.
-- KEYS[1] the list (ZSET: post ids scored by id, one score-0 sentinel)
-- ARGV[1] exclusive upper bound ('+inf' for a first page); ARGV[2] count; ARGV[3] cap;
-- ARGV[4] TTL to refresh in ms (0: leave it alone)
-- Returns {} when the list does not exist, else {sentinel, floor, id, id, ...}.
local sentinel = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
if not sentinel then
  return {}
end
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
-- A list holding `cap` ids has been trimmed (or was built from a longer history): it is complete
-- only down to its oldest id. A shorter one holds everything since it was built: floor 0.
local floor = '0'
if redis.call('ZCARD', KEYS[1]) - 1 >= tonumber(ARGV[3]) then
  floor = redis.call('ZRANGE', KEYS[1], 1, 1)[1]
end
local max = '+inf'
if ARGV[1] ~= '+inf' then
  max = '(' .. ARGV[1]
end
local ids = redis.call('ZRANGE', KEYS[1], max, 1, 'BYSCORE', 'REV', 'LIMIT', 0, ARGV[2])
local out = {sentinel, floor}
for i = 1, #ids do
  out[#out + 1] = ids[i]
end
return out
