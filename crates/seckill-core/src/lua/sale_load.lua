-- sale_load.lua: put a sale's stock and buyers into Redis, unless they are there.
--
-- KEYS[1]  the sale's stock key
-- KEYS[2]  the sale's buyers set
-- KEYS[3]  the sale's load epoch
-- ARGV[1]  units left according to PostgreSQL (stock_total - sold)
-- ARGV[2]  a fresh random id for this load (the new epoch)
-- ARGV[3..] user ids PostgreSQL holds an order for
--
-- Returns 1 if the sale was loaded, 0 if Redis already had it.
--
-- Called when a sale is created, and again whenever a purchase finds the
-- stock key missing (Redis was restarted without persistence). Two instances
-- may find it missing at the same moment; because the check and the writes
-- are one script, only the first load happens and the second cannot reset a
-- stock that purchases have already decremented.
--
-- Every load writes a new epoch, here and (in the same PostgreSQL
-- transaction that read the figures, holding the sale's row) in
-- `sales.load_epoch`. The race it fences: a worker holds a reserved batch
-- when Redis is wiped; a load reads PostgreSQL, where the batch is not
-- committed yet, so the new stock counts its units as unsold and its buyers
-- as free to buy. The worker read the epoch before it reserved; its commit
-- compares it with PostgreSQL's under the same row lock and, finding a
-- newer load, writes nothing (see `Store::confirm_orders`).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[3], ARGV[2])
for i = 3, #ARGV do
  redis.call('SADD', KEYS[2], ARGV[i])
end
return 1
