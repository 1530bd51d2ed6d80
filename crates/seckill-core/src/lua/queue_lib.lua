-- queue_lib.lua: helpers shared by the queue scripts, and by every script
-- that passes Redis a number (`int`) or reads its clock (`now_ms`).
--
-- Not a script of its own: `queue_script!` (queue.rs) puts this text in
-- front of every script that needs it (Redis scripts cannot call each
-- other), so that "push a job" is written in this one file, in two
-- forms: `push_many`, three variadic calls for a batch of any size (the
-- worker's deadlines, the queue's enqueue), and `push_fresh_many`, the
-- two writes of `push_many` without its look at the known ids, for ids
-- new by construction (the purchase scripts' pass jobs).

-- The Redis server's clock in milliseconds. Due times and leases are always
-- measured on this one clock, never on the clocks of the app instances,
-- which may disagree with each other.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An integer as the text Redis commands take. Redis turns a Lua number
-- passed to redis.call into text itself, with snprintf("%.17g"): a
-- floating-point conversion of some thousands of instructions, which
-- was a tenth of what Redis ran for a purchase and its drain (one due
-- time per order; callgrind, docs/bench.md). '%d' is an integer's, and a
-- value a whole batch shares is converted once.
local function int(n)
  return string.format('%d', n)
end

-- Run a variadic command (ZREM, HDEL, HMGET, ZADD, ZMSCORE...) on `key`
-- with every value of `args`, a few hundred at a time: one call for a
-- whole batch costs Redis far less than one call per job, and Lua's
-- unpack() takes only a few thousand values at once. `args` must keep
-- pairs together (ZADD's score and member): the step is even. Returns the
-- replies of every call, in order, as one list (for HMGET and ZMSCORE).
local function call_many(command, key, args)
  local replies = {}
  for first = 1, #args, 500 do
    local reply = redis.call(command, key, unpack(args, first, math.min(first + 499, #args)))
    if type(reply) == 'table' then
      for _, value in ipairs(reply) do
        replies[#replies + 1] = value
      end
    end
  end
  return replies
end

-- The attempts entries of `ids`, in order (nil where a job has none),
-- read only when the attempts hash exists. It holds a job's count only
-- past its first delivery (queue_reserve.lua), so on a queue whose jobs
-- run once it is absent; an HMGET of a key that is not there still costs
-- Redis its arguments and a reply for each of them, thousands a batch.
-- (The EXISTS and the read are one script's, so nothing comes between.)
local function attempts_of(attempts, ids)
  if redis.call('EXISTS', attempts) == 0 then
    return {}
  end
  return call_many('HMGET', attempts, ids)
end

-- A job's weight: how many units of work it carries. A pass's job
-- (domain/pass_job.rs) carries the pass's orders and says how many
-- first, `{"n":K,...`; every other job weighs 1. The reserve hands out
-- a batch's weight (queue_reserve.lua), so that a batch of passes holds
-- as many orders as a batch of single orders, not up to 256 times as
-- many.
local function weight_of(payload)
  return math.max(1, tonumber(string.match(payload, '^{"n":(%d+),')) or 1)
end

-- A pass's job payload for the orders whose bodies are `bodies`:
-- `{"n":K,"orders":[...]}` (domain/pass_job.rs' `pass_payload`, built
-- the same way), the count first for `weight_of`.
local function pass_payload(bodies)
  return '{"n":' .. int(#bodies) .. ',"orders":[' .. table.concat(bodies, ',') .. ']}'
end

-- Enqueue many jobs whose ids are new, all due at `due_at`, without
-- looking whether they are known: for a caller whose ids are new by
-- construction (the purchase scripts: ids drawn at random for a pass; a
-- `lock` commit sent twice is refused by the fence before it writes, a
-- `lua` call run twice takes nobody while its job is queued). An id
-- that was known would have its job replaced and its due time moved:
-- every other caller uses `push_many`. `entries` is { id1, payload1, id2,
-- payload2, ... }. Returns how many were added.
local function push_fresh_many(due, jobs, entries, due_at)
  local scored, score = {}, int(due_at)
  for i = 1, #entries, 2 do
    scored[#scored + 1] = score
    scored[#scored + 1] = entries[i]
  end
  call_many('HSET', jobs, entries)
  call_many('ZADD', due, scored)
  return #scored / 2
end

-- Enqueue many jobs by id, all due at `due_at`. `entries` is { id1,
-- payload1, id2, payload2, ... }. An id already known (due, in flight or
-- dead), or given twice, is added once, so that enqueueing twice never
-- duplicates a job. Returns how many were added.
local function push_many(due, jobs, entries, due_at)
  local ids = {}
  for i = 1, #entries, 2 do
    ids[#ids + 1] = entries[i]
  end
  local known = call_many('HMGET', jobs, ids)
  local fresh, seen = {}, {}
  for k, id in ipairs(ids) do
    if not known[k] and not seen[id] then
      seen[id] = true
      fresh[#fresh + 1] = id
      fresh[#fresh + 1] = entries[2 * k]
    end
  end
  return push_fresh_many(due, jobs, fresh, due_at)
end
