-- Read a batch of a like-stream shard for its lease owner only, so a worker that lost its lease
-- while stalled cannot take entries into its pending list after the new owner claimed the old
-- ones (they would apply out of order at the next takeover).
-- KEYS[1]  the shard's lease     KEYS[2]  the shard's like stream (one slot: `{s<k>}`)
-- ARGV[1]  the owner token (also the consumer name)     ARGV[2]  the consumer group
-- ARGV[3]  how many entries at most
-- ARGV[4]  optional: 'new' reads new entries only, skipping the caller's pending ones (the worker's
--          read-ahead, while the previous batch, still pending, is in its transaction)
-- Returns {status, reply, last id}:
--   {0}                      the caller does not hold the lease: nothing read
--   {3}                      the consumer group does not exist (Redis restarted empty)
--   {1, reply}               the caller's own pending entries (XREADGROUP … 0), replayed first
--   {2, reply or nil, id}    new entries (XREADGROUP … >); when none, `id` is the stream's last
--                            entry id (`0-0` if empty), for a blocking XREAD that waits for newer
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
if ARGV[4] ~= 'new' then
  local mine = redis.pcall('XREADGROUP', 'GROUP', ARGV[2], ARGV[1], 'COUNT', ARGV[3], 'STREAMS', KEYS[2], '0')
  if type(mine) == 'table' and mine.err then
    return {3}
  end
  if mine and #mine[1][2] > 0 then
    return {1, mine}
  end
end
local new = redis.pcall('XREADGROUP', 'GROUP', ARGV[2], ARGV[1], 'COUNT', ARGV[3], 'STREAMS', KEYS[2], '>')
if type(new) == 'table' and new.err then
  return {3}
end
if new then
  return {2, new}
end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
return {2, false, last[1] and last[1][1] or '0-0'}
