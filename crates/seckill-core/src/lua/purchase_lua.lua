-- purchase_lua.lua: the whole purchase in one script, no lock (the `lua`
-- strategy).
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master and never spans two sales:
-- KEYS[1]  the sale's stock          KEYS[3]  its queue's due set
-- KEYS[2]  the sale's holds hash     KEYS[4]  its queue's jobs hash
--          (buyer -> order id)
-- KEYS[5]  the room's admitted       KEYS[6]  the room's bought
--          (keys.rs: RoomKeys; both untouched unless ARGV[5])
-- ARGV[1]  the buyer's user id
-- ARGV[2]  the order id (also the queue job id)
-- ARGV[3]  the order job's payload
-- ARGV[4]  the sale's events channel (pub/sub, not a key)
-- ARGV[5]  '1' when the sale has a waiting room: the buyer's admission is
--          checked and spent here, in the same step as the take
--
-- Returns {status, units left, order id}: {'taken', left, false},
-- {'already_purchased', 0, the order the buyer's unit belongs to} (false
-- for a roomed sale's buyer whose admission bought already and whose
-- unit came back), {'sold_out', 0, false}, or
-- {'not_admitted', 0, false} for a roomed sale's buyer the room does not
-- hold as admitted (or whose admission's end passed on Redis' clock), or
-- {'not_loaded', 0, false} if the sale is not in Redis (the caller loads
-- it from PostgreSQL and calls again). The order id of a refusal is read
-- in the same step as the refusal: a buyer who asks again because their
-- `202` was lost on its way learns the order they won.
--
-- The race this prevents is the oversell itself: the checks (has this
-- buyer bought? is a unit left?) and the writes (take the unit, record the
-- buyer, queue the order) are one script, and Redis runs one script at a
-- time, so no other purchase can run between the check and the write.
-- That is all the lock was for: when everything the decision needs is in
-- one Redis (one hash slot), a script is the lock, without the waiting,
-- the TTL or the fence. The lock is the general tool for when the decision
-- needs more than one script can see. The waiting room's door is one
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
local roomed = ARGV[5] == '1'
-- One read tells both whether the sale is loaded and what is left: each
-- redis.call has a cost of its own beyond its command's, and this script
-- is the whole of a purchase.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {'not_loaded', 0, false}
end
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then
  return {'already_purchased', 0, held}
end
if roomed and redis.call('SISMEMBER', KEYS[6], ARGV[1]) == 1 then
  return {'already_purchased', 0, false}
end
if tonumber(stock) <= 0 then
  return {'sold_out', 0, false}
end
-- Redis' clock, read once for the take alone: a refusal above reads
-- nothing more.
local now = now_ms()
if roomed then
  local ends = redis.call('ZSCORE', KEYS[5], ARGV[1])
  if not ends or tonumber(ends) <= now then
    return {'not_admitted', 0, false}
  end
  -- The buyer's place among the active goes to the next in line.
  redis.call('ZREM', KEYS[5], ARGV[1])
end
local left = redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
push(KEYS[3], KEYS[4], ARGV[2], ARGV[3], now)
redis.call('PUBLISH', ARGV[4], int(left))
return {'taken', left, false}
