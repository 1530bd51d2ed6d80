-- purchase_lua.lua: the whole purchase in one script, no lock (the `lua`
-- strategy), for the buyers of one sale waiting at once on one instance
-- (its sale lane, strategy/lanes.rs): one buyer or up to 256.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master and never spans two sales:
-- KEYS[1]  the sale's stock          KEYS[3]  its queue's due set
-- KEYS[2]  the sale's holds hash     KEYS[4]  its queue's jobs hash
--          (buyer -> order id)
-- KEYS[5]  the room's admitted       KEYS[6]  the room's bought
--          (keys.rs: RoomKeys; both untouched unless ARGV[2])
-- KEYS[7]  the sale's voided: passes whose answer was lost, looked up
--          since (lua/pass_void.lua)
-- ARGV[1]  the sale's events channel (pub/sub, not a key)
-- ARGV[2]  '1' when the sale has a waiting room: each buyer's admission
--          is checked and spent here, in the same step as the take
-- ARGV[3]  the pass's id: the id of the one queue job that carries the
--          orders taken (domain/pass_job.rs)
-- ARGV[4..] one triple per buyer, in arrival order: the buyer's user id,
--          the order id the buyer takes if they win, the order job's
--          payload
--
-- Returns {'done', units left, answers}, one answer per buyer in order:
-- 'taken'; 'sold_out'; 'busy' (below); 'not_admitted' for a roomed sale's buyer the room
-- does not hold as admitted (or whose admission's end passed on Redis'
-- clock); 'spent' for a roomed sale's buyer whose admission bought
-- already and whose unit came back; or the id of the order the buyer
-- holds already (bought before, or earlier in this same batch). Or
-- {'not_loaded', 0, {}} if the sale is not in Redis (the caller loads it
-- from PostgreSQL and calls again). The order id of a refusal is read in
-- the same step as the refusal: a buyer who asks again because their
-- `202` was lost on its way learns the order they won. And a buyer whose
-- held order is the one this call names for them is told 'taken': a call
-- that ran twice (sent again on a new connection) takes nothing twice,
-- and tells each buyer it took the same. While the first run's job is
-- still queued it takes nobody new either: a buyer it refused, who could
-- be taken now (a unit came back meanwhile), is told 'busy', to ask
-- again. Their order would need that job's id, which is also the pass's
-- first order id (domain/pass_job.rs), so no job could be named for it.
-- And a call whose answer was lost, and which the instance has looked up
-- since (its id in KEYS[7]), takes nobody when it lands late: its buyers
-- were told what the look found (lua/pass_void.lua).
--
-- The race this prevents is the oversell itself: the checks (has this
-- buyer bought? is a unit left?) and the writes (take the unit, record the
-- buyer, queue the order) are one script, and Redis runs one script at a
-- time, so no other purchase can run between the check and the write.
-- That is all the lock was for: when everything the decision needs is in
-- one Redis (one hash slot), a script is the lock, without the waiting,
-- the TTL or the fence. The lock is the general tool for when the decision
-- needs more than one script can see. Taking a lane's buyers in one call
-- changes nothing of that: the buyers are decided in turn, each against
-- the units the ones before left, and a buyer who comes twice takes at
-- most one unit. It only spends what a script, a round trip and a queue
-- job cost once for all of them (docs/bench.md, "`lua` in lanes").
--
-- The waiting room's door is one
-- more check here: an admission is spent while its buyer holds a unit
-- (the holds hash, the first check) and, once an unpaid order is
-- cancelled, in the room's bought, which the return writes in the same
-- step as it takes the buyer out of the holds hash (unit_return.lua). So
-- an admission can never buy twice, whatever dies when, and the take
-- itself is the mark: the door writes nothing but taking the buyer off
-- the admitted.
--
-- And that is its other check: an admission is honoured only while the
-- room holds it. The instance checks the admission's signature and
-- expiry, but a signed admission outlives what Redis lost (a wipe, a
-- failover under `local`, an instance that admitted from an old primary
-- cut off from the others): honoured then, more than the room's
-- `max_active` could buy at once, past the line. Nor once its end has
-- passed on Redis' clock, which the room keeps as the buyer's score: an
-- instance whose clock runs behind Redis' would still call it valid, and
-- until a visit sweeps it out it would buy past its turn.
--
-- Every read and write below is one call for the whole batch
-- (`call_many`), not one per buyer: each redis.call has a cost of its own
-- beyond its command's, and this script is the whole of a purchase.
-- One read tells both whether the sale is loaded and what is left.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {'not_loaded', 0, {}}
end
local roomed = ARGV[2] == '1'
local buyers = {}
for i = 4, #ARGV, 3 do
  buyers[#buyers + 1] = ARGV[i]
end
local held = call_many('HMGET', KEYS[2], buyers)
local bought, ends = {}, {}
if roomed then
  bought = call_many('SMISMEMBER', KEYS[6], buyers)
  ends = call_many('ZMSCORE', KEYS[5], buyers)
end
local left = tonumber(stock)
-- Redis' clock, read once, and only once a take is possible: a batch of
-- refusals reads nothing more.
local now = nil
-- Whether this call's job is queued already, or the call was voided by a
-- look after its answer was lost: asked once, and only once a take is
-- possible.
local ran_before = nil
local answers, takers, holds, bodies, taken_here = {}, {}, {}, {}, {}
for k, buyer in ipairs(buyers) do
  local i = 4 + 3 * (k - 1)
  local mine = held[k] or taken_here[buyer]
  if held[k] == ARGV[i + 1] then
    -- This very call ran before, and took this buyer's unit.
    answers[k] = 'taken'
  elseif mine then
    answers[k] = mine
  elseif bought[k] == 1 then
    answers[k] = 'spent'
  elseif left <= 0 then
    answers[k] = 'sold_out'
  else
    now = now or now_ms()
    if ran_before == nil then
      ran_before = redis.call('HEXISTS', KEYS[4], ARGV[3]) == 1
        or redis.call('SISMEMBER', KEYS[7], ARGV[3]) == 1
    end
    if roomed and (not ends[k] or tonumber(ends[k]) <= now) then
      answers[k] = 'not_admitted'
    elseif ran_before then
      answers[k] = 'busy'
    else
      left = left - 1
      answers[k] = 'taken'
      taken_here[buyer] = ARGV[i + 1]
      takers[#takers + 1] = buyer
      holds[#holds + 1] = buyer
      holds[#holds + 1] = ARGV[i + 1]
      bodies[#bodies + 1] = ARGV[i + 2]
    end
  end
end
if #takers > 0 then
  left = redis.call('DECRBY', KEYS[1], int(#takers))
  call_many('HSET', KEYS[2], holds)
  -- One job for the orders taken, not one each. (A second run finds
  -- no job of this id queued: the worker has acked the first run's,
  -- whose orders are in PostgreSQL, and the id names this one now.)
  push_fresh_many(KEYS[3], KEYS[4], { ARGV[3], pass_payload(bodies) }, now)
  if roomed then
    -- Their places among the active go to the next in line.
    call_many('ZREM', KEYS[5], takers)
  end
  redis.call('PUBLISH', ARGV[1], int(left))
end
return {'done', left, answers}
