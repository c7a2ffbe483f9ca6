-- Start rebuilding a timeline (by the holder of its rebuild lock): drop the old one and leave
-- an empty one carrying `building:<token>`, so that fan-out pushes made while PostgreSQL is
-- read land in it (`feed_fill.lua` then adds what PostgreSQL returned).
-- KEYS[1] timeline; ARGV[1] the building sentinel; ARGV[2] TTL (ms)
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
