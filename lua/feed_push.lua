-- Fan-out: add post ids to a capped list, only if the list exists (an active user's timeline,
-- or a celebrity course's list). Idempotent: a replayed push changes nothing.
-- KEYS[1] the list: a ZSET of post ids scored by id, plus one score-0 sentinel at rank 0
-- ARGV[1] cap (post ids kept); ARGV[2..] post ids
-- Returns 1 when pushed, 0 when the list does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i])
end
-- Keep the sentinel (rank 0) and the newest `cap` ids: drop ranks 1 .. -(cap + 1).
redis.call('ZREMRANGEBYRANK', KEYS[1], 1, -(tonumber(ARGV[1]) + 1))
return 1
