-- login_failure.lua: count an admin token attempt from one client.
--
-- KEYS[1]  the client's attempt counter
-- ARGV[1]  how long the count lasts from the first attempt, in milliseconds
--
-- Returns {attempts in the current window, milliseconds the window has left}.
--
-- The race this prevents: counted BEFORE the token is compared, and cleared after a right one: a
-- client firing many guesses at once cannot slip them all in while the
-- counter still reads low (check, compare, then count would let every
-- guess in flight through).
--
-- The bug this also prevents: INCR and then PEXPIRE as two commands leave
-- a counter with no expiry when the caller dies between them (the
-- article's SETNX-then-EXPIRE bug again), and the client stays locked out
-- for ever.
local attempts = redis.call('INCR', KEYS[1])
if attempts == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return {attempts, redis.call('PTTL', KEYS[1])}
