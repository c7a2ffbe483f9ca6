-- After a batch's COMMIT (or a dead letter): acknowledge its entries and retire their pending
-- records, atomically, so a liked-set load sees either the records or the committed rows.
-- KEYS[1]         the shard's like stream
-- KEYS[2]         the shard's load generations (see liked_set_load.lua)
-- KEYS[3 .. 2+m]  the pending-records hash of each of the m retired events (repeats allowed)
-- KEYS[3+m ..]    liked-sets to drop: they hold an op PostgreSQL refused or never took, and
--                 reload from the truth on next use
-- ARGV[1]  the consumer group     ARGV[2]  n     ARGV[3]  m
-- ARGV[4 .. 3+n]  entry ids to XACK and XDEL
-- ARGV[4+n .. 3+n+3m]  m triples: member, the pending record the event wrote
--                 (`+ <entry id>`), the generation bucket of its set
-- ARGV[4+n+3m]    the id of the transaction that committed the batch, or `0` (a dead letter:
--                 nothing committed); stamped on each bucket whose record is removed
--                 (load_stamp.lua, the prelude)
-- A record is removed only while it is still the one this event wrote: a later toggle of the
-- same target replaced it, and that one stays until its own event is retired. Every removal
-- bumps its bucket, so a load whose rows were read before this COMMIT retries.
-- All keys share the shard's hash slot. Returns how many records were removed.
local n = tonumber(ARGV[2])
local m = tonumber(ARGV[3])
if n > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4, 3 + n))
  redis.call('XDEL', KEYS[1], unpack(ARGV, 4, 3 + n))
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
