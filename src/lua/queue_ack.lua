-- queue_ack.lua: the jobs are done; forget them.
--
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
-- ARGV[2k-1], ARGV[2k]  job id, the attempt number reserve handed out (k = 1, 2, ...)
--
-- Returns how many jobs were acknowledged.
--
-- An ack counts only for the attempt that holds the job now. If a worker
-- stalled past its lease and the job was delivered again, the stalled
-- worker's late ack must not remove the job from under the new attempt.
local inflight, jobs, attempts = KEYS[2], KEYS[3], KEYS[4]
local acked = 0
for i = 1, #ARGV, 2 do
  local id, attempt = ARGV[i], ARGV[i + 1]
  if redis.call('ZSCORE', inflight, id) and redis.call('HGET', attempts, id) == attempt then
    redis.call('ZREM', inflight, id)
    redis.call('HDEL', jobs, id)
    redis.call('HDEL', attempts, id)
    acked = acked + 1
  end
end
return acked
