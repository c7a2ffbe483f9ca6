-- After a batch's COMMIT (or a dead letter): acknowledge its entries and retire their pending
-- records, atomically, so a liked-set load sees either the records or the committed rows.
-- KEYS[1]         the shard's like stream
-- KEYS[2]         the shard's load generations (see liked_set_load.lua)
-- KEYS[3 .. 2+m]  the pending-records hash of each of the m retired events (repeats allowed)
-- KEYS[3+m ..]    liked-sets to drop: they hold an op PostgreSQL refused or never took, and
--                 reload from the truth on next use
-- ARGV[1]  the consumer group     ARGV[2]  n     ARGV[3]  m
-- ARGV[4 .. 3+n]  entry ids to XACK and remove from the stream
-- ARGV[4+n .. 3+n+3m]  m triples: member, the pending record the event wrote
--                 (`+ <entry id>`), the generation bucket of its set
-- ARGV[4+n+3m]    the id of the transaction that committed the batch, or `0` (a dead letter:
--                 nothing committed); stamped on each bucket whose record is removed
--                 (load_stamp.lua, the prelude)
-- ARGV[5+n+3m]    the highest of the n entry ids     ARGV[6+n+3m]  the id right after it
-- Acknowledged entries leave the stream, so every entry in it is a like not yet applied. The
-- group delivers in id order, so when none of its pending entries is at or below the highest
-- id, every entry up to it has been acknowledged and one XTRIM MINID removes them, whole
-- listpack nodes at a time. Otherwise (an entry retried alone stays pending while later ones
-- apply) the trim stops at that pending entry, and XDEL, which seeks each id through its
-- node, removes the named entries above it.
-- A record is removed only while it is still the one this event wrote: a later toggle of the
-- same target replaced it, and that one stays until its own event is retired. Every removal
-- bumps its bucket, so a load whose rows were read before this COMMIT retries.
-- All keys share the shard's hash slot. Returns how many records were removed.
local n = tonumber(ARGV[2])
local m = tonumber(ARGV[3])
if n > 0 then
  local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4, 3 + n))
  local highest, after_highest = ARGV[5 + n + 3 * m], ARGV[6 + n + 3 * m]
  -- The group's oldest pending entry at or below the highest id, if any (one seek in the
  -- group's pending list; a malformed id is an error, and falls back to XDEL).
  local below = highest and redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', highest, 1)
  -- Trimming relies on this group having delivered these entries: when some were not pending
  -- (a retire run again, or the group made anew), only the named entries go.
  if acked < n or after_highest == nil or not below or below.err then
    redis.call('XDEL', KEYS[1], unpack(ARGV, 4, 3 + n))
  elseif below[1] then
    redis.call('XTRIM', KEYS[1], 'MINID', below[1][1])
    redis.call('XDEL', KEYS[1], unpack(ARGV, 4, 3 + n))
  else
    redis.call('XTRIM', KEYS[1], 'MINID', after_highest)
  end
end
local xid = ARGV[4 + n + 3 * m] or '0'
local removed = 0
for i = 1, m do
  local at = 4 + n + (i - 1) * 3
  local pending = KEYS[2 + i]
  if redis.call('HGET', pending, ARGV[at]) == ARGV[at + 1] then
    redis.call('HDEL', pending, ARGV[at])
    redis.call('HINCRBY', KEYS[2], ARGV[at + 2], 1)
    stamp_load(KEYS[2], ARGV[at + 2], xid)
    removed = removed + 1
  end
end
for k = 3 + m, #KEYS do
  redis.call('UNLINK', KEYS[k])
end
return removed
