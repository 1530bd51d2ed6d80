-- purchase_commit.lua: the writes of a batch of purchases, fenced by the
-- sale's lock, and the lock's release, announced.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master and never spans two sales:
-- KEYS[1]  the sale's stock          KEYS[4]  its queue's due set
-- KEYS[2]  the sale's holds hash     KEYS[5]  its queue's jobs hash
--          (buyer -> order id)
-- KEYS[3]  the sale's lock           KEYS[6]  the sale's fenced counter
-- KEYS[7]  the room's admitted       KEYS[8]  the room's bought
--          (keys.rs: RoomKeys; both untouched unless ARGV[4])
-- ARGV[1]  the lock value this caller got from lock_acquire.lua
--          ("token:holder:nonce")
-- ARGV[2]  the sale's events channel (pub/sub, not a key): the new units
--          left are published on it, for the live sale pages
-- ARGV[3]  the channel (not a key) the lock's release is announced on
--          (keys::lock_released; see lock_release.lua)
-- ARGV[4]  '1' when the sale has a waiting room: each buyer's admission is
--          checked and spent here, in the same step as the take
-- ARGV[5]  the pass's id: the id of the one queue job that carries the
--          pass's orders (domain/pass_job.rs)
-- ARGV[6..] one triple per order: the buyer's user id, the order id, the
--          order job's payload
--
-- Returns {'committed', units left after these sales, spent, withdrawn}
-- when it wrote, `spent` the orders (0-based) refused because their
-- buyer's admission had bought already, `withdrawn` those refused because
-- the room does not hold their buyer as admitted (below); or
-- {'lock_lost', 0, {}, {}} if the caller no longer holds the lock (nothing was written but the fenced counter,
-- which counts such refusals). A pair and a list, not
-- one number: DECRBY can return any number, including a negative one
-- (Redis already out of step, say after the `naive` strategy ran on the
-- same sale), so no number could stand for "lock lost" without turning
-- some real commit into a refusal.
--
-- The race this prevents: a purchase takes the lock, reads "1 left, buyer
-- new", and then stalls (a pause, a slow network) past the lock's TTL. The
-- lock expires, a second purchase takes it, reads "1 left" too and sells the
-- unit. If the first purchase then wrote its decision, the unit would be
-- sold twice. So the writes first check, in the same atomic step, that the
-- lock still holds this caller's value: a stale holder writes nothing.
-- (The value includes the fencing token, so a holder can never mistake a
-- later holder's lock for its own.)
--
-- Why the release is here too: every write to Redis is a round trip, and
-- with an fsync'ed append-only file each one waits for the disk. The lock
-- is held across them all; one step fewer inside it is one fsync fewer per
-- batch for every buyer queued behind. The release is announced as
-- lock_release.lua announces it, so that waiters on other instances wake.
--
-- Why not do the whole purchase in this one script, without a lock? In Redis
-- alone that would work, and be faster. The lock is the article's lesson and
-- the general tool: it is what you need when the decision involves more than
-- one script can see. The fence here is what makes a lock with a TTL safe.
--
-- The waiting room's door is here too: an admission buys once. Checked
-- before the purchase and marked spent after it, as two steps, an
-- instance that died between the take and the mark left the admission
-- unspent, and once the unpaid order was cancelled (its buyer no longer
-- holding a unit) the same admission bought again. Here the check and
-- the take are one step, and the take is the mark: an admission is spent
-- while its buyer holds a unit (the holds hash, written below), and once
-- the unit comes back, the return puts the buyer in the room's bought
-- set in the same step (unit_return.lua). So the check is that set
-- alone, which here holds only the returned, and the door's one write per
-- buyer is taking them off the admitted (keys.rs: RoomKeys::bought).
--
-- And an admission is honoured only while the room holds it. The
-- instance checks the admission's signature and expiry, but a signed
-- admission outlives what Redis lost (a wipe, a failover under `local`,
-- an instance that admitted from an old primary cut off from the
-- others): honoured then, more than the room's `max_active` could buy at
-- once, past the line. So a buyer the admitted does not hold is refused
-- here, in the step that would take their place among the active; and so
-- is one whose end (their score there) has passed on Redis' clock, which
-- an instance whose clock runs behind Redis' would still call valid, and
-- which buys past its turn until a visit sweeps it out.
if redis.call('GET', KEYS[3]) ~= ARGV[1] then
  redis.call('INCR', KEYS[6])
  return {'lock_lost', 0, {}, {}}
end
local roomed = ARGV[4] == '1'
local now = now_ms()
local buyers = {}
for i = 6, #ARGV, 3 do
  buyers[#buyers + 1] = ARGV[i]
end
-- Every write below is one call for the whole batch (`call_many`,
-- `push_fresh_many`), not one per order: a handful of commands for the
-- script to run, whatever the batch's size, the waiting room's door
-- included (its checks are one SMISMEMBER and one ZMSCORE). What Redis
-- spends per purchase is the ceiling of a sale (docs/capacity.md).
local bought, held = {}, {}
if roomed then
  bought = call_many('SMISMEMBER', KEYS[8], buyers)
  held = call_many('ZMSCORE', KEYS[7], buyers)
end
local spent, withdrawn, takers, holds, bodies = {}, {}, {}, {}, {}
for k, buyer in ipairs(buyers) do
  local i = 6 + 3 * (k - 1)
  if bought[k] == 1 then
    spent[#spent + 1] = k - 1
  elseif roomed and (not held[k] or tonumber(held[k]) <= now) then
    withdrawn[#withdrawn + 1] = k - 1
  else
    takers[#takers + 1] = buyer
    holds[#holds + 1] = buyer
    holds[#holds + 1] = ARGV[i + 1]
    bodies[#bodies + 1] = ARGV[i + 2]
  end
end
local left = redis.call('DECRBY', KEYS[1], int(#takers))
if #takers > 0 then
  call_many('HSET', KEYS[2], holds)
  -- One job for the pass's orders, not one each: its entry in the due
  -- set and its body are what Redis spent most on per purchase. Its
  -- payload is domain/pass_job.rs' `pass_payload`, the count first for
  -- the reserve to weigh it (queue_lib.lua: weight_of). The pass's id is
  -- new (drawn for this pass), and this script writes only once (a
  -- second run of it finds the lock released, above). So no look at the
  -- known ids (`push_fresh_many`).
  push_fresh_many(KEYS[4], KEYS[5], { ARGV[5], pass_payload(bodies) }, now)
end
if roomed and #takers > 0 then
  -- Their places among the active go to the next in line.
  call_many('ZREM', KEYS[7], takers)
end
redis.call('PUBLISH', ARGV[2], int(left))
redis.call('DEL', KEYS[3])
redis.call('PUBLISH', ARGV[3], 'released')
return {'committed', left, spent, withdrawn}
