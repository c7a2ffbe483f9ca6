-- Count one validated view in one counter shard.
-- KEYS[1]  the post's counter in shard k   STRING
-- KEYS[2]  shard k's dirty set             SET (same slot: both carry {vc<k>})
-- ARGV[1]  post id
-- Returns the shard counter's new value.
local n = redis.call('INCR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
return n
