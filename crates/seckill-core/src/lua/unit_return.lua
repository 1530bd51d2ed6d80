-- unit_return.lua: give a cancelled order's unit back, once.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master and never spans two sales:
-- KEYS[1]  the sale's stock
-- KEYS[2]  the sale's holds hash (buyer -> the order their unit belongs to)
-- KEYS[3]  the sale's set of orders whose unit was returned
-- KEYS[4]  the room's bought         KEYS[5]  the room's state
--          (keys.rs: RoomKeys; untouched when the sale has no room in play)
-- ARGV[1]  the cancelled order's id
-- ARGV[2]  its buyer's user id
-- ARGV[3]  the sale's events channel (pub/sub, not a key)
--
-- Returns {'returned', units left after the return}, {'already_returned', 0}
-- if there was nothing to give back (this order's unit was returned before,
-- or its buyer holds no unit in Redis), or {'not_loaded', 0} if the sale is
-- not loaded in Redis (then nothing is written; the caller loads the sale
-- from PostgreSQL, which already counts the cancellation, and calls again).
-- Pairs, not numbers: INCR can return any number, including a negative one
-- when Redis was oversold, so no number could stand for a status.
--
-- Called after PostgreSQL has cancelled the order, by every delivery of its
-- deadline job, including the redeliveries that follow a worker crash
-- between the PostgreSQL commit and this script. The race this prevents:
-- the deadline job is delivered twice (a crash before its ack, or a second
-- worker after a lease ran out), and both deliveries give the unit back:
-- the stock grows by two for one cancelled order, and the sale oversells.
-- The marker set makes the return happen once per order id: the first
-- delivery adds the id, every later one finds it and writes nothing.
--
-- Why the buyer check too: after the return, the buyer may buy again. A
-- late duplicate of the old job must not remove the buyer of the NEW order
-- from the holds; the marker stops it before it gets there. Unless the
-- marker is gone: Redis lost the sale (a wipe) after the return, the sale
-- was loaded again, the buyer bought again, and then a late copy of the
-- old deadline came (a sweep that read the order before it was cancelled).
-- So the buyer's entry names the order it belongs to, and a return for
-- another order leaves it alone. An entry that names no order ('', written
-- by a deliberately broken strategy) is taken as this one's.
--
-- The waiting room's door: a buyer who bought with an admission holds a
-- unit, and while they hold it, the holds hash is what says the admission
-- is spent (purchase_commit.lua). Taking them out of it here would make
-- the admission whole again, and it would buy a second unit while it
-- lasts. So a sale with a room in play (its state there) keeps the buyer
-- in the room's bought in the same step, with the room's end.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded', 0}
end
local held = redis.call('HGET', KEYS[2], ARGV[2])
if not held or (held ~= '' and held ~= ARGV[1]) then
  return {'already_returned', 0}
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  return {'already_returned', 0}
end
redis.call('HDEL', KEYS[2], ARGV[2])
-- The room's end as a moment (PEXPIRETIME), not a time left: a time
-- left read and set again could land a millisecond off the room's other
-- keys, each of whose expiries is that same moment.
local room_ends = redis.call('PEXPIRETIME', KEYS[5])
if room_ends ~= -2 then
  redis.call('SADD', KEYS[4], ARGV[2])
  if room_ends > 0 then
    redis.call('PEXPIREAT', KEYS[4], int(room_ends))
  end
end
local left = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[3], int(left))
return {'returned', left}
