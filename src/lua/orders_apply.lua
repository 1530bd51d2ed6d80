-- orders_apply.lua: count orders PostgreSQL confirmed in a sale's Redis
-- figures, once each.
--
-- KEYS[1]  the sale's stock
-- KEYS[2]  the sale's buyers set
-- ARGV[1]  the sale's events channel (pub/sub, not a key)
-- ARGV[2..] the buyers of orders PostgreSQL has just confirmed
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
-- load's new epoch and runs this after its commit.
--
-- Once per order: a buyer already in the set (the load came after the
-- commit and counted the order, or this ran before) is skipped, so running
-- it again changes nothing.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local applied = 0
for i = 2, #ARGV do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    redis.call('DECR', KEYS[1])
    applied = applied + 1
  end
end
if applied > 0 then
  redis.call('PUBLISH', ARGV[1], redis.call('GET', KEYS[1]))
end
return applied
