-- queue_retry.lua: give reserved jobs back, to run again after a delay.
--
-- KEYS are one queue's, under its sale's hash tag {sale:ID} (keys.rs), so
-- the script runs on one Redis Cluster master and never spans two sales:
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
-- ARGV[1]  delay in milliseconds
-- ARGV[2]  attempts after which a job is given up on (dead-lettered)
-- ARGV[3]  1 if this attempt counts (the job failed), 0 if it does not
--          (the worker could not even try: PostgreSQL was down)
-- ARGV[2k+2], ARGV[2k+3]  job id, the attempt number reserve handed out
--
-- Returns { requeued, dead_lettered }.
--
-- The race this prevents: like ack, only the attempt that holds a job may
-- give it back. A stalled worker's late retry, checked and applied as
-- separate commands, could put back a job another worker now holds, and
-- the job would run twice at once.
local due, inflight, attempts, dead = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local now = now_ms()
local due_at, max_attempts, counted = now + tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
-- As text, once (queue_lib.lua: int).
local now_text, due_text = int(now), int(due_at)
local requeued, buried = 0, 0
for i = 4, #ARGV, 2 do
  local id, attempt = ARGV[i], ARGV[i + 1]
  -- No entry: the job's first delivery (queue_reserve.lua).
  local holding = redis.call('HGET', attempts, id)
  if redis.call('ZSCORE', inflight, id) and (holding or '1') == attempt then
    redis.call('ZREM', inflight, id)
    if not counted then
      -- Not counted: back to the count before this delivery (none
      -- before the first).
      if holding then
        redis.call('HINCRBY', attempts, id, '-1')
      end
      redis.call('ZADD', due, due_text, id)
      requeued = requeued + 1
    elseif tonumber(attempt) >= max_attempts then
      redis.call('ZADD', dead, now_text, id)
      buried = buried + 1
    else
      -- Counted: the next reserve hands it out as the next attempt.
      if not holding then
        redis.call('HSET', attempts, id, attempt)
      end
      redis.call('ZADD', due, due_text, id)
      requeued = requeued + 1
    end
  end
end
return { requeued, buried }
