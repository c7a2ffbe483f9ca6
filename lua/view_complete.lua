-- Complete a post view: single use, dwell and both caps, decided atomically.
-- KEYS[1]  the ticket                        STRING `<user> <post> <ip> <validity ms> <life ms>`,
--          set with PX <life ms> when the view started (`views::Views::open_command`), and
--          ` used` appended once completed; its remaining PTTL is the clock: the time since
--          the start is <life ms> - PTTL, by Redis's clock (one clock for every instance)
-- KEYS[2]  the user's cap counter on the post  STRING
-- KEYS[3]  the IP's cap counter on the post    STRING
-- KEYS[4]  the post's unique viewers           HyperLogLog
-- (all four share the post's hash tag: one slot)
-- ARGV[1]  caller's user id   ARGV[2]  post id   ARGV[3]  minimum dwell in ms
-- ARGV[4]  cap per user (0: none)   ARGV[5]  cap per IP (0: none)   ARGV[6]  cap window in ms
-- Returns {status, detail}:
--   {0, 0}  no such ticket, or another user's (the caller learns nothing about it)
--   {1, 0}  counted: caps charged, viewer added to the HyperLogLog; the caller INCRs a shard
--   {2, 0}  ALREADY_USED        {3, 0}  EXPIRED
--   {4, ms} TOO_SHORT, ms of dwell still missing; the ticket stays usable
--   {5, 0}  CAPPED; the ticket is used up
local ticket = redis.call('GET', KEYS[1])
if not ticket then
  return {0, 0}
end
local f = {}
for word in string.gmatch(ticket, '%S+') do
  f[#f + 1] = word
end
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] then
  return {0, 0}
end
if f[6] == 'used' then
  return {2, 0}
end
local left = redis.call('PTTL', KEYS[1])
local dwelt = tonumber(f[5]) - left
if left < 0 or dwelt > tonumber(f[4]) then
  return {3, 0}
end
local need = tonumber(ARGV[3])
if dwelt < need then
  return {4, need - dwelt}
end
redis.call('SET', KEYS[1], ticket .. ' used', 'KEEPTTL')
local user_cap = tonumber(ARGV[4])
local ip_cap = tonumber(ARGV[5])
local by_user = tonumber(redis.call('GET', KEYS[2]) or '0')
local by_ip = tonumber(redis.call('GET', KEYS[3]) or '0')
if (user_cap > 0 and by_user >= user_cap) or (ip_cap > 0 and by_ip >= ip_cap) then
  return {5, 0}
end
for i = 2, 3 do
  if redis.call('INCR', KEYS[i]) == 1 or redis.call('PTTL', KEYS[i]) < 0 then
    redis.call('PEXPIRE', KEYS[i], ARGV[6])
  end
end
redis.call('PFADD', KEYS[4], ARGV[1])
return {1, 0}
