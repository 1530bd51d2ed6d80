-- lock_release.lua: delete the lock only if the caller still holds it, and
-- announce the release to the waiters.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's value (as set by lock_acquire.lua: "token:holder:nonce")
-- ARGV[2]  the channel (not a key) the release is published on
--          (keys::lock_released)
--
-- Returns 1 released, 0 expired (the key is gone), -1 not the owner (another
-- caller holds it now).
--
-- The article's bug this fixes: their unlock deleted the key without checking
-- who held it. A holder whose lock had expired (a long GC pause, a slow
-- network) would then delete the lock of the next holder, letting a third
-- caller in while the second was still inside. Compare and delete must be one
-- step: a GET followed by a DEL from the client could still delete a lock
-- that changed hands between the two commands.
--
-- The publish is the article's 100 ms poll, fixed the way Redisson fixes it:
-- a waiter sleeps until the release is announced (or its back-off ends, in
-- case the message is lost) instead of asking again and again. In the same
-- script as the delete, so no waiter hears of a release that did not
-- happen. (A waiter must listen before it asks: lock.rs says why.)
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
