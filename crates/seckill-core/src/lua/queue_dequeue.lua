-- queue_dequeue.lua: take one waiting job off the queue, only if its due time
-- is still the one the caller saw.
--
-- KEYS are one queue's, under its sale's hash tag {sale:ID} (keys.rs), so
-- the script runs on one Redis Cluster master and never spans two sales:
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
-- ARGV[1]  job id
-- ARGV[2]  the due time in ms the caller read (from top or due_at)
--
-- Returns 1 removed, 0 left alone: the job is not waiting (it is in flight,
-- dead or gone), or it is waiting with another due time.
--
-- The race this prevents: a due time that changed means the job was put back since the caller looked
-- (a retry, a re-drive): the caller decided about the job as it was, and must
-- not remove the job as it is now. The article read the score, compared it
-- and deleted, under a queue-wide lock that every other queue operation
-- waited on (and that, expiring mid-way, let a second caller in). Read,
-- compare and delete in one script need no lock.
--
-- A job in flight is not in the due set, so it is never removed here: a
-- worker holds it, and only that worker's ack or retry decides its fate.
-- A dead job is left for re-drive the same way.
--
-- The body and the attempt count go with the job. The article's queue held
-- ids only; ours holds bodies too, and a body left behind would make enqueue
-- (which skips ids it knows) refuse that id forever.
local due, jobs, attempts = KEYS[1], KEYS[3], KEYS[4]
local id, expected = ARGV[1], tonumber(ARGV[2])
local score = redis.call('ZSCORE', due, id)
if not score or tonumber(score) ~= expected then
  return 0
end
redis.call('ZREM', due, id)
redis.call('HDEL', jobs, id)
redis.call('HDEL', attempts, id)
return 1
