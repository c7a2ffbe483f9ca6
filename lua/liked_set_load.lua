-- Prelude of like_toggle.lua and liked_set_warm.lua: load a missing liked-set.
-- A liked-set is a cache of PostgreSQL's like rows PLUS the events the stream has not applied
-- yet. So a load adds the rows the caller read, then overlays the (user, course) pending
-- records (member -> `+ <entry id>` / `- <entry id>`, the last accepted op per target).
-- The rows may predate an apply that committed and removed its pending record after the
-- caller read them; the worker bumps the set's bucket in the shard's generation hash whenever
-- it removes a record, so the caller passes the bucket value it read BEFORE reading the rows,
-- and a load that finds another value loads nothing and returns it (the caller reads again).
-- Returns false when it loaded the set, or the current generation when it refused.
local function load_liked_set(set, pending, generations, bucket, expected, ttl_ms, first_member)
  local current = redis.call('HGET', generations, bucket) or '0'
  if current ~= expected then
    return current
  end
  redis.call('SADD', set, '_')
  -- unpack() of thousands of values overflows Lua's stack: add in chunks.
  for i = first_member, #ARGV, 1000 do
    redis.call('SADD', set, unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  local records = redis.call('HGETALL', pending)
  for i = 1, #records, 2 do
    if string.sub(records[i + 1], 1, 1) == '+' then
      redis.call('SADD', set, records[i])
    else
      redis.call('SREM', set, records[i])
    end
  end
  redis.call('PEXPIRE', set, ttl_ms)
  return false
end
