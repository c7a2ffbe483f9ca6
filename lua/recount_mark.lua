-- Mark a like target dirty for the recount job (level 2).
-- KEYS[1] dirty ZSET (member -> mark sequence); KEYS[2] sequence counter (same hash slot).
-- ARGV[1] member (p:<id> / c:<id>). The score is a strictly increasing sequence, so the job can
-- tell whether a target was marked again after it read it (see recount_clear.lua).
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], seq, ARGV[1])
return seq
