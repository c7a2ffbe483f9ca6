-- Move some of shard k's unflushed counters into a pending flush record, atomically: a view is
-- either still in its counter or in exactly one record, never both, never neither.
-- KEYS[1]  shard k's dirty set                 SET of post ids
-- KEYS[2]  shard k's index of pending records  SET of batch uuids
-- KEYS[3]  the new record                      HASH post id -> views
-- KEYS[3+i] the counter of post ARGV[1+i]      (every key carries the shard's hash tag: one slot)
-- ARGV[1]  the batch uuid   ARGV[1+i] the post ids the caller drew from the dirty set
-- A post drawn here leaves the dirty set with its counter; a view counted since the draw is in
-- the counter and moves with it; a post marked dirty since the draw waits for the next round.
-- Returns how many posts the record holds (0: no record was written).
local moved = 0
for i = 2, #ARGV do
  local post = ARGV[i]
  redis.call('SREM', KEYS[1], post)
  local n = redis.call('GETDEL', KEYS[2 + i])
  if n and tonumber(n) > 0 then
    redis.call('HINCRBY', KEYS[3], post, n)
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('SADD', KEYS[2], ARGV[1])
end
return moved
