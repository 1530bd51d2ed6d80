-- queue_reserve.lua: take due jobs for processing, under a lease.
--
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
-- ARGV[1]  how many jobs at most
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempts after which an expired job is given up on (dead-lettered)
--
-- Returns { reclaimed, dead_lettered, { {id, payload, attempt}, ... } }.
--
-- The article's pop() read the due jobs and deleted them from the queue: a
-- consumer that died after the pop and before it finished lost the job for
-- good. Here the jobs move into the in-flight set in the same atomic step,
-- with a lease deadline. Only ack (queue_ack.lua) removes a job for good; a
-- job whose lease ran out because its worker died is put back by the next
-- reserve, below, and delivered again. Delivery is therefore at least once,
-- and the consumer must make a second delivery harmless (the worker does:
-- the order id is PostgreSQL's primary key).
local due, inflight, jobs, attempts, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limit, lease, max_attempts = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()

-- 1. Leases that ran out: their worker died or stalled. Back to due, or to
--    the dead-letter set once the job has had its attempts (a job that
--    crashes every worker that takes it must not crash them forever).
local reclaimed, buried = 0, 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', inflight, id)
  if tonumber(redis.call('HGET', attempts, id) or '0') >= max_attempts then
    redis.call('ZADD', dead, now, id)
    buried = buried + 1
  else
    redis.call('ZADD', due, now, id)
    reclaimed = reclaimed + 1
  end
end

-- 2. Take the due jobs, oldest first.
local taken = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', due, id)
  local payload = redis.call('HGET', jobs, id)
  if payload then
    local attempt = redis.call('HINCRBY', attempts, id, 1)
    redis.call('ZADD', inflight, now + lease, id)
    taken[#taken + 1] = { id, payload, attempt }
  else
    -- A due id without a body cannot be run; drop the stray entry.
    redis.call('HDEL', attempts, id)
  end
end
return { reclaimed, buried, taken }
