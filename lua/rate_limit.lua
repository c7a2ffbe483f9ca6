-- Fixed-window rate limit, atomic (after the fixed_window.lua prelude).
-- KEYS[1]  the window counter (one key per subject and window kind)
-- ARGV[1]  allowed events per window
-- ARGV[2]  window length in milliseconds
-- Returns 0 when the event is allowed, else the milliseconds until the window resets.
return fixed_window(KEYS[1], ARGV[1], ARGV[2])
