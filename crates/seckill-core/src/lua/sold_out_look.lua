-- sold_out_look.lua: a sale's units left, and how many holds it has
-- written in all, read at one moment.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master:
-- KEYS[1]  the sale's stock
-- KEYS[2]  the sale's holds hash (buyer -> the order their unit belongs to)
-- KEYS[3]  the sale's set of orders whose unit was returned
-- ARGV     none
--
-- Returns {stock or false, holds written}. Read only.
--
-- What the count is for (strategy/sold_out.rs): an instance that saw the
-- sale sold out answers from memory every buyer its list of holders does
-- not name. A take adds a hold; a return (unit_return.lua) takes one out
-- of the holds and adds its order to the returned set in the same step.
-- So the holds plus the returned grow by one with every take and stay
-- put with every return: a count unchanged since the list was made means
-- no hold was written since, and a changed one that the list may miss a
-- buyer who took a returned unit.
--
-- The race this prevents: read as separate commands, a return and a
-- take between them would be counted by one read and not the other, and
-- a stock read before a take could pair with a count read after it.
local stock = redis.call('GET', KEYS[1])
if stock then
  stock = tonumber(stock)
end
return {stock, redis.call('HLEN', KEYS[2]) + redis.call('SCARD', KEYS[3])}
