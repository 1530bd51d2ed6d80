-- queue_redrive.lua: put every dead-lettered job back on the queue, with its
-- attempts reset (after an operator fixed what killed them), due one after
-- another: the first now, each next one ARGV[1] ms later.
--
-- KEYS are one queue's, under its sale's hash tag {sale:ID} (keys.rs), so
-- the script runs on one Redis Cluster master and never spans two sales:
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order)
-- ARGV[1]  the spacing between the re-driven jobs' due times, in ms
--
-- Returns how many jobs were re-driven.
--
-- The race this prevents: read the dead set, then move each job back, as
-- separate commands, and a job a worker buries between the read and the
-- moves stays dead while the operator is told every job was re-driven; a
-- reserve between a job's move and its attempts' reset takes it with its
-- old count and buries it again at once. One script moves them all in one
-- step.
--
-- Why spread out: jobs that died together were often batch-mates, dragged
-- down by one poison job. Due all at once, they would be reserved as one
-- batch again, with the poison job among them; due one by one, each is
-- tried on its own (or in a small batch), and the poison job alone fails.
local due, attempts, dead = KEYS[1], KEYS[4], KEYS[5]
local spacing = tonumber(ARGV[1])
local now = now_ms()
local ids = redis.call('ZRANGE', dead, '0', '-1')
for i, id in ipairs(ids) do
  redis.call('ZREM', dead, id)
  redis.call('HDEL', attempts, id)
  redis.call('ZADD', due, int(now + (i - 1) * spacing), id)
end
return #ids
