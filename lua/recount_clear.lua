-- Clear dirty marks the recount job has handled, unless they were marked again meanwhile.
-- KEYS[1] dirty ZSET; ARGV pairs: member, the score the job read.
-- Returns how many marks were cleared.
local cleared = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    cleared = cleared + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return cleared
