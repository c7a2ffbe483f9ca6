-- Load a liked-set for a read, only if it is not loaded already (after the liked_set_load.lua
-- prelude, which explains the generation).
-- KEYS[1]  liked-set of (user, course)    KEYS[2]  its pending records    KEYS[3]  the shard's
--          load generations (one hash slot, the user's shard tag)
-- ARGV[1]  TTL in milliseconds     ARGV[2]  the set's generation bucket
-- ARGV[3]  the generation read before the rows were read
-- ARGV[4..] members (p:<id> / c:<id>) as PostgreSQL has them, possibly thousands
-- Returns 1 when it loaded the set, 0 when it existed (a concurrent warm or toggle won), -3
-- when an apply moved the generation since (the caller reads the rows again).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if load_liked_set(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[1], 4) then
  return -3
end
return 1
