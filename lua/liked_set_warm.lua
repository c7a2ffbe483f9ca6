-- Load a liked-set from PostgreSQL's rows, only if it is not loaded already.
-- KEYS[1]  liked-set of (user, course)
-- ARGV[1]  TTL in milliseconds; ARGV[2..] members (p:<id> / c:<id>), possibly thousands
-- Always adds the sentinel `_`, so "loaded but empty" differs from "not loaded".
-- Returns 1 when it loaded the set, 0 when it existed (a concurrent warm or toggle won).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('SADD', KEYS[1], '_')
-- unpack() of thousands of values overflows Lua's stack: add in chunks.
local chunk = 1000
for i = 2, #ARGV, chunk do
  local last = math.min(i + chunk - 1, #ARGV)
  redis.call('SADD', KEYS[1], unpack(ARGV, i, last))
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
