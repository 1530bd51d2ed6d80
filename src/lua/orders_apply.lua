-- orders_apply.lua: count orders PostgreSQL confirmed in a sale's Redis
-- figures, once each.
--
-- KEYS[1]  the sale's stock
-- KEYS[2]  the sale's buyers set
-- KEYS[3]  the sale's set of orders whose unit was returned
-- ARGV[1]  the sale's events channel (pub/sub, not a key)
-- ARGV[2..] pairs: the id of an order PostgreSQL holds a unit for, then its
--           buyer
--
-- Returns how many buyers were missing (each now holds a unit and took one
-- from the stock), or -1 if the sale is not loaded (nothing to correct: the
-- next load reads PostgreSQL, which counts these orders).
--
-- The race this closes: a worker reserves a batch; Redis is wiped; a page
-- or a purchase loads the sale from PostgreSQL before the batch commits,
-- so the stock counts the batch's units as unsold and its buyers as free.
-- Left so, Redis promises more units than PostgreSQL will grant: later
-- 202s end rejected, and those buyers can buy twice. The worker sees the
-- load's new epoch and runs this after its commit; and, for a worker that
-- died between its commit and that step, the sweep runs it for every order
-- PostgreSQL holds a unit for (`worker/reconcile.rs`).
--
-- Once per order: a buyer already in the set (the load came after the
-- commit and counted the order, or this ran before) is skipped, so running
-- it again changes nothing. An order whose unit was given back is skipped
-- too: its caller read "confirmed" from PostgreSQL, then the deadline
-- cancelled it and `unit_return.lua` ran; counting it now would take a unit
-- for an order that no longer holds one.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local applied = 0
for i = 2, #ARGV, 2 do
  if redis.call('SISMEMBER', KEYS[3], ARGV[i]) == 0
     and redis.call('SADD', KEYS[2], ARGV[i + 1]) == 1 then
    redis.call('DECR', KEYS[1])
    applied = applied + 1
  end
end
if applied > 0 then
  redis.call('PUBLISH', ARGV[1], redis.call('GET', KEYS[1]))
end
return applied
