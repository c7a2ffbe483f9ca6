-- Forget a liked-set after a like written straight to PostgreSQL (sync and recount modes):
-- drop it, move its bucket's load generation, and stamp the bucket with the writing
-- transaction (after the load_stamp.lua prelude).
-- KEYS[1]  liked-set of (user, course)     KEYS[2]  the shard's load generations (one slot)
-- ARGV[1]  the set's generation bucket     ARGV[2]  the writing transaction's id, or ''
redis.call('UNLINK', KEYS[1])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
stamp_load(KEYS[2], ARGV[1], ARGV[2])
return 1
