-- Start a post view: store the ticket with the start time of the Redis clock (one clock for
-- every instance, so dwell is measured by the server, never claimed by the client).
-- KEYS[1]  the ticket                       HASH
-- ARGV[1]  user id    ARGV[2]  post id    ARGV[3]  client ip
-- ARGV[4]  ticket validity in ms (after it, completing is EXPIRED)
-- ARGV[5]  key lifetime in ms (validity plus a grace, so EXPIRED can still be told apart)
-- ARGV[6]  backdate in ms (0 in production; benchmarks start tickets in the past)
-- Returns the start time in ms.
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[6])
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'p', ARGV[2], 'ip', ARGV[3], 't', ms, 'exp', ms + tonumber(ARGV[4]))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return ms
