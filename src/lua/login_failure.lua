-- login_failure.lua: count a wrong admin token from one client.
--
-- KEYS[1]  the client's failure counter
-- ARGV[1]  how long the count lasts from the first failure, in milliseconds
--
-- Returns the failures counted in the current window.
--
-- The bug this prevents: INCR and then PEXPIRE as two commands leave a
-- counter with no expiry when the caller dies between them (the article's
-- SETNX-then-EXPIRE bug again), and the client stays locked out for ever.
local failures = redis.call('INCR', KEYS[1])
if failures == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return failures
