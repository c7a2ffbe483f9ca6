-- A write changed or deleted a post: move its generation, so that a load in flight (which may
-- have read the post before the write) does not store, and drop the entry. For a deleted post
-- the entry becomes a "missing" marker instead, so the next reads answer NOT_FOUND at once.
-- KEYS[1] entry (HASH); KEYS[2] generation
-- ARGV[1] generation TTL (ms); ARGV[2] 'drop' or 'missing'; ARGV[3] marker fresh-until (ms);
-- ARGV[4] marker TTL (ms)
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
if ARGV[2] == 'missing' then
  redis.call('HSET', KEYS[1], 's', 'missing', 'fresh', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
