-- Admit a view start (after the fixed_window.lua prelude), atomically: the user's bound on
-- open view tickets, then their view-start rate limit; when both allow it, the new ticket
-- takes a slot among the open ones. Completing a ticket (the service ZREMs it) or its expiry
-- frees the slot: expired entries are trimmed here, and the set expires with its last ticket.
-- KEYS[1]  the user's open tickets        ZSET `<post>.<uuid>` -> expiry (ms, Redis clock)
-- KEYS[2]  the user's view-start window    STRING (fixed_window)
-- (both carry the user's hash tag: one slot)
-- ARGV[1]  most open tickets (0: no bound; nothing is tracked)
-- ARGV[2]  the new ticket   ARGV[3]  ticket validity in ms   ARGV[4]  backdate in ms
-- ARGV[5]  view starts per window (0: no limit)   ARGV[6]  window in ms
-- Returns {status, ms}:
--   {0, 0}   admitted (the ticket holds a slot)
--   {1, ms}  too many open tickets: ms until the oldest expires; nothing was counted
--   {2, ms}  over the rate limit: ms until the window resets
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local bound = tonumber(ARGV[1])
local open = 0
if bound > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
  open = redis.call('ZCARD', KEYS[1])
  if open >= bound then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {1, math.max(1, tonumber(oldest[2]) - ms)}
  end
end
local wait = fixed_window(KEYS[2], ARGV[5], ARGV[6])
if wait > 0 then
  return {2, wait}
end
if bound > 0 then
  local expiry = ms - tonumber(ARGV[4]) + tonumber(ARGV[3])
  -- A ticket started so far back that it has expired already holds no slot.
  if expiry > ms then
    redis.call('ZADD', KEYS[1], expiry, ARGV[2])
    -- The set lives as long as its last ticket. A set that held tickets already has the
    -- expiry of its latest one (every ZADD sets it), so GT keeps the later of the two; a set
    -- the trim above emptied was deleted, and starts with this ticket's.
    if open == 0 then
      redis.call('PEXPIRE', KEYS[1], expiry - ms)
    else
      redis.call('PEXPIRE', KEYS[1], expiry - ms, 'GT')
    end
  end
end
return {0, 0}
