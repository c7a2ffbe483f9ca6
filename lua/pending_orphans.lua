-- Find, and optionally remove, pending records whose event is no longer in the stream (an
-- operator trimmed or deleted entries): nothing will ever apply or retire them, and every
-- load of their liked-set would keep showing their op.
-- KEYS[1]  a (user, course) pending-records hash     KEYS[2]  its shard's like stream
-- ARGV[1]  `1` to remove the orphans, `0` to count them
-- Returns the orphaned members. Checking and removing in one script: a record the worker
-- retires, or a toggle replaces, meanwhile is never touched.
local orphans = {}
local records = redis.call('HGETALL', KEYS[1])
for i = 1, #records, 2 do
  local id = string.match(records[i + 1], '^[+-] (.+)$')
  if id == nil or #redis.call('XRANGE', KEYS[2], id, id) == 0 then
    table.insert(orphans, records[i])
    if ARGV[1] == '1' then
      redis.call('HDEL', KEYS[1], records[i])
    end
  end
end
return orphans
