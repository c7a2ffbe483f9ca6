-- Prelude of like_batch_done.lua and liked_set_forget.lua, read by like_toggle.lua: the load
-- stamp of a generation bucket, field `x<bucket>` of the shard's load generations, is the
-- highest id of a PostgreSQL transaction (`pg_current_xact_id()`) that changed like rows of a
-- set of that bucket and whose pending record was retired (or whose set was forgotten). A
-- first-touch load carries rows read with no generation before them, but with its
-- snapshot's xmin: every transaction below xmin was over when the rows were read, so a stamp
-- below xmin means every retired change is in the rows (liked_set_load.lua explains why a
-- retired change missing from the rows would be lost).
local function stamp_load(generations, bucket, xid)
  if xid == '' or xid == '0' then
    return
  end
  local field = 'x' .. bucket
  local current = redis.call('HGET', generations, field)
  if not current or tonumber(xid) > tonumber(current) then
    redis.call('HSET', generations, field, xid)
  end
end
