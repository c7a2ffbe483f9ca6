-- Fixed-window rate limit, atomic.
-- KEYS[1]  the window counter (one key per subject and window kind)
-- ARGV[1]  allowed events per window
-- ARGV[2]  window length in milliseconds
-- Returns 0 when the event is allowed, else the milliseconds until the window resets.
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if count > tonumber(ARGV[1]) then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 then
    -- A counter without expiry would block forever: repair it.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    ttl = tonumber(ARGV[2])
  end
  return ttl
end
return 0
