-- sale_load.lua: put a sale's stock and holds into Redis, unless they are
-- there, loaded from this database.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master and never spans two sales:
-- KEYS[1]  the sale's stock key
-- KEYS[2]  the sale's holds hash (buyer -> the order their unit belongs to)
-- KEYS[3]  the sale's load epoch
-- KEYS[4..] the sale's other keys that hold its state (lock, queues,
--          returned orders, voided passes, answers, waiting room): cleared with the rest when the
--          sale in Redis was loaded from another database
-- ARGV[1]  units left according to PostgreSQL (stock_total - sold)
-- ARGV[2]  a fresh id for this load (the new epoch): "db:<database id>:<random>"
-- ARGV[3]  "db:<database id>:", what every epoch of this database starts with
-- ARGV[4]  "new" for a sale just created (whatever Redis holds under its id
--          is another database's, epoch or none), "known" otherwise
-- ARGV[5]  the epoch the loader read before this script, holding the
--          sale's row ("" for none)
-- ARGV[6..] pairs: a user id PostgreSQL holds an order for, and that order's id
--
-- Returns 1 if the sale was loaded, 0 if Redis already had it.
--
-- Called when a sale is created, and whenever a purchase, a deadline or
-- a page finds the stock key missing (Redis was restarted without
-- persistence). The race this prevents: two instances may find it missing
-- at the same moment; because the check and the writes are one script,
-- only the first load happens and the second cannot reset a stock that
-- purchases have already decremented.
--
-- Every load writes a new epoch, here and (in the same PostgreSQL
-- transaction that read the figures, holding the sale's row) in
-- `sales.load_epoch`. The race it fences: a worker holds a reserved batch
-- when Redis is wiped; a load reads PostgreSQL, where the batch is not
-- committed yet, so the new stock counts its units as unsold and its buyers
-- as free to buy. The worker read the epoch before it reserved; its commit
-- compares it with PostgreSQL's and Redis' under the same row lock and,
-- finding a newer load, writes nothing (see `Store::confirm_orders`).
--
-- The epoch also names the database (migrations/*_database_identity.sql).
-- A sale whose epoch names another one is another database's sale 1 under
-- the same prefix: its keys are cleared and it is loaded from here. So is
-- anything under the id of a sale just created. Otherwise an epoch that
-- names no database (written before identities existed) is taken as this
-- database's. (Two deployments running at once on one prefix still
-- interfere: each clears the other's keys when it creates a sale.)
local epoch = redis.call('GET', KEYS[3])
-- A load still on its way after its loader gave up on it (a reply timeout;
-- its transaction rolled back and let the row go) must not land on a sale
-- that moved on since: a worker may have committed a batch meanwhile,
-- which the figures here do not count. The worker marks the epoch when it
-- commits on a sale Redis has lost (`Store::confirm_orders`).
if (epoch or '') ~= ARGV[5] then
  return 0
end
local ours = ARGV[3]
local foreign = ARGV[4] == 'new' or (epoch and string.sub(epoch, 1, 3) == 'db:'
  and string.sub(epoch, 1, #ours) ~= ours)
if redis.call('EXISTS', KEYS[1]) == 1 and not foreign then
  return 0
end
if foreign then
  for i = 1, #KEYS do
    redis.call('DEL', KEYS[i])
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[3], ARGV[2])
for i = 6, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
return 1
