-- Fill a capped list with post ids read from PostgreSQL, and give it its sentinel.
--   A timeline being rebuilt: only if it still carries our `building:<token>` sentinel (pushes
--   made while PostgreSQL was read stay in it); the sentinel becomes the course list it covers.
--   A celebrity course's list: only if it does not exist yet (expected sentinel '').
-- KEYS[1] the list
-- ARGV[1] expected sentinel ('' = the list must not exist); ARGV[2] new sentinel; ARGV[3] cap;
-- ARGV[4] TTL in ms (0: none); ARGV[5..] post ids
-- Returns 1 when filled, 0 when the list was taken over, dropped, or (for '') existed already.
if ARGV[1] == '' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
  end
else
  if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    return 0
  end
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZADD', KEYS[1], 0, ARGV[2])
-- unpack() of thousands of values overflows Lua's stack: add in chunks.
local chunk = 500
for first = 5, #ARGV, chunk do
  local args = {}
  for i = first, math.min(first + chunk - 1, #ARGV) do
    args[#args + 1] = ARGV[i]
    args[#args + 1] = ARGV[i]
  end
  redis.call('ZADD', KEYS[1], unpack(args))
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[3]) + 1))
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
