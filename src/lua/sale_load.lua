-- sale_load.lua: put a sale's stock and buyers into Redis, unless they are there.
--
-- KEYS[1]  the sale's stock key
-- KEYS[2]  the sale's buyers set
-- ARGV[1]  units left according to PostgreSQL (stock_total - sold)
-- ARGV[2..] user ids PostgreSQL holds an order for
--
-- Returns 1 if the sale was loaded, 0 if Redis already had it.
--
-- Called when a sale is created, and again whenever a purchase finds the
-- stock key missing (Redis was restarted without persistence). Two instances
-- may find it missing at the same moment; because the check and the writes
-- are one script, only the first load happens and the second cannot reset a
-- stock that purchases have already decremented.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
for i = 2, #ARGV do
  redis.call('SADD', KEYS[2], ARGV[i])
end
return 1
