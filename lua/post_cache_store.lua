-- Store a post loaded from PostgreSQL in its cache entry, unless a write moved the post's
-- generation since the load began (it read the post before that write: storing it would
-- bring back what the write replaced). A live value keeps the newer of two counters: a like
-- count patched in after the load (higher like_v) and a larger view count win.
-- KEYS[1] entry (HASH); KEYS[2] generation
-- ARGV[1] generation read before the load ('0' when there was none)
-- ARGV[2] 'live' or 'missing'; ARGV[3] fresh-until (ms); ARGV[4] physical TTL (ms)
-- live only: ARGV[5] row (JSON); ARGV[6] like_count; ARGV[7] like_version; ARGV[8] comment_count;
--            ARGV[9] view_count
-- Returns 1 when stored, 0 when refused.
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[1] then
  return 0
end
if ARGV[2] == 'missing' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 's', 'missing', 'fresh', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
local likes, like_v, views = ARGV[6], ARGV[7], ARGV[9]
local old = redis.call('HMGET', KEYS[1], 's', 'likes', 'like_v', 'views')
if old[1] == 'live' then
  if tonumber(old[3] or '-1') > tonumber(like_v) then
    likes, like_v = old[2], old[3]
  end
  if tonumber(old[4] or '-1') > tonumber(views) then
    views = old[4]
  end
end
redis.call('HSET', KEYS[1], 's', 'live', 'fresh', ARGV[3], 'row', ARGV[5], 'likes', likes, 'like_v', like_v,
  'comments', ARGV[8], 'views', views)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
