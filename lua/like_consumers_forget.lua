-- After a worker takes a shard over and claims every pending entry, forget the group's other
-- consumers: each worker process reads under a consumer name of its own, so without this a
-- group keeps one consumer per worker that ever held the shard, for ever.
-- KEYS[1]  the shard's lease     KEYS[2]  the shard's like stream (one slot: `{s<k>}`)
-- ARGV[1]  the owner token (also the consumer name)     ARGV[2]  the consumer group
-- Only the lease owner forgets, and only consumers with nothing pending (deleting a consumer
-- drops its pending entries, which would then never apply); in one script, so no consumer
-- can take an entry between the check and the delete.
-- Returns how many consumers were forgotten, or -1 when the caller does not hold the lease.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[2], ARGV[2])
if consumers.err then
  return 0
end
local forgotten = 0
for _, consumer in ipairs(consumers) do
  local name, pending
  for i = 1, #consumer, 2 do
    if consumer[i] == 'name' then
      name = consumer[i + 1]
    elseif consumer[i] == 'pending' then
      pending = consumer[i + 1]
    end
  end
  if name ~= nil and name ~= ARGV[1] and pending == 0 then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[2], ARGV[2], name)
    forgotten = forgotten + 1
  end
end
return forgotten
