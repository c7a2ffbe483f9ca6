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
-- Acknowledged entries leave the stream, so every entry in it is a like not yet applied. Below
-- the group's oldest pending entry every entry has been acknowledged (the group delivers in id
-- order), so one XTRIM MINID removes them whole listpack nodes at a time; XDEL, which seeks
-- each id through its node, is only for entries acknowledged above a pending one (an entry
-- retried alone stays pending while later ones apply).
-- A record is removed only while it is still the one this event wrote: a later toggle of the
-- same target replaced it, and that one stays until its own event is retired. Every removal
-- bumps its bucket, so a load whose rows were read before this COMMIT retries.
-- All keys share the shard's hash slot. Returns how many records were removed.
local n = tonumber(ARGV[2])
local m = tonumber(ARGV[3])
-- Stream ids compare as (ms, seq), each a decimal number without leading zeros: the longer
-- one is the larger, and equal lengths compare as text (no float rounding of 64-bit parts).
local function id_parts(id)
  return string.match(id, '^(%d+)-(%d+)$')
end
local function number_after(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end
local function id_after(a, b)
  local a_ms, a_seq = id_parts(a)
  local b_ms, b_seq = id_parts(b)
  if a_ms ~= b_ms then
    return number_after(a_ms, b_ms)
  end
  return number_after(a_seq, b_seq)
end
if n > 0 then
  local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4, 3 + n))
  local highest, after_highest = ARGV[5 + n + 3 * m], ARGV[6 + n + 3 * m]
  -- The group's oldest pending entry, if any (the extended form: one seek in the group's
  -- pending list, where the summary form walks every consumer the group ever had).
  local oldest = redis.pcall('XPENDING', KEYS[1], ARGV[1], '-', '+', 1)
  -- Trimming relies on this group having delivered these entries: when some were not pending
  -- (a retire run again, or the group made anew), only the named entries go.
  if acked < n or highest == nil or after_highest == nil or id_parts(highest) == nil or oldest.err then
    redis.call('XDEL', KEYS[1], unpack(ARGV, 4, 3 + n))
  elseif oldest[1] then
    -- Everything below the oldest pending entry is acknowledged.
    local pending = oldest[1][1]
    redis.call('XTRIM', KEYS[1], 'MINID', pending)
    if id_after(highest, pending) then
      redis.call('XDEL', KEYS[1], unpack(ARGV, 4, 3 + n))
    end
  else
    -- Nothing pending: everything up to the highest acknowledged entry is acknowledged.
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
