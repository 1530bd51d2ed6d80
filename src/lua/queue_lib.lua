-- queue_lib.lua: helpers shared by the queue scripts.
--
-- Not a script of its own: queue.rs and purchase.rs put this text in front
-- of every script that needs it (Redis scripts cannot call each other), so
-- that "push a job" is written once.

-- The Redis server's clock in milliseconds. Due times and leases are always
-- measured on this one clock, never on the clocks of the app instances,
-- which may disagree with each other.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Enqueue by id: a job id that is already known (due, in flight or dead) is
-- left as it is, so enqueueing twice never duplicates a job.
-- Returns 1 if the job was added, 0 if it was already there.
local function push(due, jobs, id, payload, due_at)
  if redis.call('HSETNX', jobs, id, payload) == 1 then
    redis.call('ZADD', due, due_at, id)
    return 1
  end
  return 0
end
