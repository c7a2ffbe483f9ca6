-- Prelude of the scripts that rate-limit (rate_limit.lua, like_toggle.lua, view_admit.lua):
-- the fixed-window limit, defined once. Prepended to a script's own file when it is loaded
-- (kv::script).
-- Counts one event in the window counter `key`; returns 0 when it is allowed, else the
-- milliseconds until the window resets (the event still counts against the window).
-- `limit` 0 means no limit (nothing is counted).
local function fixed_window(key, limit, window_ms)
  limit = tonumber(limit)
  if limit == 0 then
    return 0
  end
  local count = redis.call('INCR', key)
  if count == 1 then
    redis.call('PEXPIRE', key, window_ms)
  end
  if count > limit then
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then
      -- A counter without expiry would block forever: repair it.
      redis.call('PEXPIRE', key, window_ms)
      ttl = tonumber(window_ms)
    end
    return ttl
  end
  return 0
end
