-- queue_ack.lua: the jobs are done; forget them.
--
-- KEYS are one queue's, under its sale's hash tag {sale:ID} (keys.rs), so
-- the script runs on one Redis Cluster master and never spans two sales:
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
-- ARGV[2k-1], ARGV[2k]  job id, the attempt number reserve handed out (k = 1, 2, ...)
--
-- Returns how many jobs were acknowledged.
--
-- The race this prevents: an ack counts only for the attempt that holds
-- the job now. If a worker stalled past its lease and the job was
-- delivered again, the stalled worker's late ack must not remove the job
-- from under the new attempt; checked and removed as separate commands, a
-- redelivery between the two would be removed all the same.
--
-- Five calls for the whole batch (`call_many`), not five per job. A job
-- on its first delivery has no attempts entry (queue_reserve.lua), and
-- is acknowledged as attempt 1.
local inflight, jobs, attempts = KEYS[2], KEYS[3], KEYS[4]
local ids = {}
for i = 1, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
local leased = call_many('ZMSCORE', inflight, ids)
local holding = attempts_of(attempts, ids)
local done, counted, seen = {}, {}, {}
for k, id in ipairs(ids) do
  -- No entry: the job's first delivery (queue_reserve.lua).
  if leased[k] and (holding[k] or '1') == ARGV[2 * k] and not seen[id] then
    seen[id] = true
    done[#done + 1] = id
    if holding[k] then
      counted[#counted + 1] = id
    end
  end
end
call_many('ZREM', inflight, done)
call_many('HDEL', jobs, done)
call_many('HDEL', attempts, counted)
return #done
