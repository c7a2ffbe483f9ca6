-- A committed counter of a post (like count with its like_version, or view count): patch it into
-- the cached entry unless the entry already holds a newer one. Without an entry, move the
-- generation instead: a load in flight may have read the count from before this commit.
-- KEYS[1] entry (HASH); KEYS[2] generation
-- ARGV[1] 'likes' or 'views'; ARGV[2] the committed value; ARGV[3] its like_version (likes only);
-- ARGV[4] generation TTL (ms)
-- Returns 1 when the entry changed, 0 otherwise.
local state = redis.call('HGET', KEYS[1], 's')
if not state then
  redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return 0
end
if state ~= 'live' then
  return 0
end
if ARGV[1] == 'likes' then
  if tonumber(redis.call('HGET', KEYS[1], 'like_v') or '-1') < tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[1], 'likes', ARGV[2], 'like_v', ARGV[3])
    return 1
  end
elseif tonumber(redis.call('HGET', KEYS[1], 'views') or '-1') < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'views', ARGV[2])
  return 1
end
return 0
