-- queue_reserve.lua: take due jobs for processing, under a lease.
--
-- KEYS are one queue's, under its sale's hash tag {sale:ID} (keys.rs), so
-- the script runs on one Redis Cluster master and never spans two sales:
-- KEYS     due, inflight, jobs, attempts, dead (QueueKeys::all order),
--          then this reserve's record (QueueKeys::reservation: the
--          caller's token, the same when it asks again)
-- ARGV[1]  how much weight at most (a job weighs 1, a pass's job its
--          orders: queue_lib.lua, weight_of); at least one job is taken
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  attempts after which an expired job is given up on (dead-lettered)
-- ARGV[4]  1 when this token was sent before by a reserve whose answer was
--          lost: the record is then written even if nothing is taken
--
-- Returns { reclaimed, dead_lettered, { {id, payload, attempt}, ... } }.
--
-- A reserve whose answer was lost (a timeout, a dropped connection) has
-- taken its jobs, and nobody runs them: they would come back only when
-- the lease ran out, each charged an attempt it never had, and a job
-- whose reserves kept losing their answers (a connection queued behind a
-- `WAIT` that outlasts the client's timeout, every time) went to the
-- dead-letter set with its orders, each told `202`. So each reserve
-- records what it took under its caller's token, for a lease; asked
-- again with the same token, it hands out the jobs it still holds under
-- that record, leased anew, and takes nothing else. The race this
-- prevents: the same reserve, run twice, taking two batches where the
-- caller heard of one. Either may run first: the first sent can still be
-- on its way (queued behind a slow command) when the second, sent on a
-- new connection, runs; so the second writes its record even when it
-- takes nothing, and the first, landing late, takes nothing either.
--
-- The attempts hash holds a job's count only past its first delivery: a
-- job in flight without an entry is on its first, a due one has had none.
-- Most jobs run once, so most never write it, and never delete from it
-- (queue_ack.lua): two writes a job fewer, on the drain's every order.
--
-- The race this prevents: two workers that read the due jobs at once would
-- both take the same ones; reading and moving them is one step here.
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
local record = KEYS[6]
local lease, max_attempts = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
-- As text, once: every entry below is scored with it (queue_lib.lua: int).
local now_text, lease_end = int(now), int(now + lease)

-- 0. Asked again: the jobs this reserve took and still holds (in flight
--    under the lease it gave them; one whose lease ran out and was taken
--    again is another reserve's now), leased anew, with the counts the
--    lost answer carried.
local earlier = redis.call('GET', record)
if earlier then
  earlier = cjson.decode(earlier)
  local ids, held_until = earlier.ids, tonumber(earlier.lease_end)
  local scores = call_many('ZMSCORE', inflight, ids)
  local still, leased = {}, {}
  for k, id in ipairs(ids) do
    if tonumber(scores[k]) == held_until then
      still[#still + 1] = id
      leased[#leased + 1] = lease_end
      leased[#leased + 1] = id
    end
  end
  call_many('ZADD', inflight, leased)
  local payloads = call_many('HMGET', jobs, still)
  local counts = attempts_of(attempts, still)
  local taken = {}
  for k, id in ipairs(still) do
    -- No entry: the job's first delivery (below). A job is in flight
    -- with its body (only ack deletes one, and only its holder acks).
    if payloads[k] then
      taken[#taken + 1] = { id, payloads[k], tonumber(counts[k]) or 1 }
    end
  end
  earlier.lease_end = lease_end
  redis.call('SET', record, cjson.encode(earlier), 'PX', int(lease))
  return { earlier.reclaimed, earlier.buried, taken }
end

-- 1. Leases that ran out: their worker died or stalled. Back to due, or to
--    the dead-letter set once the job has had its attempts (a job that
--    crashes every worker that takes it must not crash them forever).
--    A worker that died held up to four batches (8,000 orders by default,
--    as many jobs at most):
--    a thousand are moved per reserve, the rest by the next ones, each
--    thousand in a few calls, as in step 2.
local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now_text, 'LIMIT', '0', '1000')
call_many('ZREM', inflight, expired)
local tries = attempts_of(attempts, expired)
-- { score, id, score, id, ... } for ZADD.
local to_due, to_dead, first_tries = {}, {}, {}
for k, id in ipairs(expired) do
  local pile = to_due
  local tried = tonumber(tries[k])
  if not tried then
    -- In flight with no entry: its first delivery, now counted, so that
    -- the next reserve hands it out as the second.
    tried = 1
    first_tries[#first_tries + 1] = id
    first_tries[#first_tries + 1] = '1'
  end
  if tried >= max_attempts then
    pile = to_dead
  end
  pile[#pile + 1] = now_text
  pile[#pile + 1] = id
end
call_many('HSET', attempts, first_tries)
call_many('ZADD', dead, to_dead)
call_many('ZADD', due, to_due)
local reclaimed, buried = #to_due / 2, #to_dead / 2

-- 2. Take the due jobs, oldest first, up to ARGV[1] of weight, and
--    count each delivery past the first (and over any entry there is: a
--    count of 0 that scripts before this rule left when a first delivery
--    was given back uncounted would otherwise refuse the ack of attempt 1
--    for good). A few calls for each read (`call_many`), not four per
--    job: Redis runs one script at a time, so every call here is time no
--    purchase can run.
--
--    Read a few at a time: a batch of passes is a few dozen jobs, and
--    reading a thousand payloads to take forty would copy them all into
--    the script. Each read after the first asks for as many jobs as the
--    weight left needs, at the weight per job seen so far.
local budget = tonumber(ARGV[1])
local weight = 0
local taken, leased, counted, strays = {}, {}, {}, {}
local want = math.min(budget, 64)
while true do
  local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now_text, 'LIMIT', '0', int(want))
  local payloads = call_many('HMGET', jobs, ids)
  local counts = attempts_of(attempts, ids)
  local leaving, full = {}, false
  for k, id in ipairs(ids) do
    local payload = payloads[k]
    if payload then
      local carries = weight_of(payload)
      if #taken > 0 and weight + carries > budget then
        full = true
        break
      end
      weight = weight + carries
      local attempt = (tonumber(counts[k]) or 0) + 1
      if attempt > 1 or counts[k] then
        counted[#counted + 1] = id
        counted[#counted + 1] = int(attempt)
      end
      leased[#leased + 1] = lease_end
      leased[#leased + 1] = id
      taken[#taken + 1] = { id, payload, attempt }
    else
      -- A due id without a body cannot be run; drop the stray entry.
      strays[#strays + 1] = id
    end
    leaving[#leaving + 1] = id
  end
  call_many('ZREM', due, leaving)
  if full or #ids < want or weight >= budget then
    break
  end
  if weight == 0 then
    want = math.min(budget, 500)
  else
    want = math.min(500, math.ceil((budget - weight) * #taken / weight))
  end
end
call_many('HSET', attempts, counted)
call_many('ZADD', inflight, leased)
call_many('HDEL', attempts, strays)
if #taken > 0 or ARGV[4] == '1' then
  local ids = {}
  for k, job in ipairs(taken) do
    ids[k] = job[1]
  end
  redis.call('SET', record, cjson.encode({
    ids = ids, lease_end = lease_end, reclaimed = reclaimed, buried = buried,
  }), 'PX', int(lease))
end
return { reclaimed, buried, taken }
