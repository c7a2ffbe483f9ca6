-- Release a lease (or lock) only if the caller owns it (compare-and-delete; Redis 7 has no DELEX).
-- KEYS[1] lease key; ARGV[1] owner token. Returns 1 when released, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
