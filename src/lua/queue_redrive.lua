-- queue_redrive.lua: put every dead-lettered job back on the queue, due now,
-- with its attempts reset (after an operator fixed what killed them).
--
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
--
-- Returns how many jobs were re-driven.
local due, attempts, dead = KEYS[1], KEYS[4], KEYS[5]
local now = now_ms()
local ids = redis.call('ZRANGE', dead, 0, -1)
for _, id in ipairs(ids) do
  redis.call('ZREM', dead, id)
  redis.call('HDEL', attempts, id)
  redis.call('ZADD', due, now, id)
end
return #ids
