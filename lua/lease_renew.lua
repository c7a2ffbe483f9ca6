-- Extend a lease only if the caller still owns it.
-- KEYS[1] lease key; ARGV[1] owner token; ARGV[2] TTL in milliseconds.
-- Returns 1 when renewed, 0 when the lease is gone or someone else holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
