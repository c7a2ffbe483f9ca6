-- Move shard k's unflushed counters into a pending flush record, atomically: a view is
-- either still in its counter or in exactly one record, never both, never neither.
-- KEYS[1]  shard k's dirty set                 SET of post ids
-- KEYS[2]  shard k's index of pending records  SET of batch uuids
-- KEYS[3]  the new record                      HASH post id -> views
-- ARGV[1]  the batch uuid   ARGV[2]  prefix of shard k's counters (`…:{vc<k>}:views:`)
-- ARGV[3]  most posts moved at once (the rest wait for the next round)
-- The counter keys are built from ARGV[2]: they carry the same hash tag as KEYS (one slot).
-- Returns how many posts the record holds (0: no record was written).
local posts = redis.call('SPOP', KEYS[1], ARGV[3])
local moved = 0
for _, post in ipairs(posts) do
  local n = redis.call('GETDEL', ARGV[2] .. post)
  if n and tonumber(n) > 0 then
    redis.call('HINCRBY', KEYS[3], post, n)
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('SADD', KEYS[2], ARGV[1])
end
return moved
