-- queue_enqueue.lua: add jobs, due after a delay (0 = now).
--
-- KEYS are one queue's, under its sale's hash tag {sale:ID} (keys.rs), so
-- the script runs on one Redis Cluster master and never spans two sales:
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
-- ARGV[1]  delay in milliseconds
-- ARGV[2k], ARGV[2k+1]  job id, payload (k = 1, 2, ...)
--
-- Returns the number of jobs added (ids already known are skipped).
--
-- The race this prevents: two enqueues of one id that both read "not
-- there" would both add it, the second overwriting the first's body. The
-- article took a queue-wide lock around "is the id there? then add it";
-- one script is atomic by itself and needs no lock.
local due_at = now_ms() + tonumber(ARGV[1])
local entries = {}
for i = 2, #ARGV do
  entries[#entries + 1] = ARGV[i]
end
return push_many(KEYS[1], KEYS[3], entries, due_at)
