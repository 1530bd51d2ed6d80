-- lock_abandon.lua: give up a lock attempt whose answer was lost: delete
-- the lock only if that attempt took it, and announce the release.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the attempt's nonce ("holder:uuid", lock.rs): the value
--          lock_acquire.lua sets is "fence:" followed by it
-- ARGV[2]  the channel (not a key) the release is published on
--          (keys::lock_released)
--
-- Returns 1 released, 0 not taken by that attempt (the key is gone, or
-- another caller's).
--
-- The race this prevents: an attempt sent into a stalled server (or whose
-- reply timed out on the way) is answered as an error, and the caller
-- gives up; the attempt itself still runs when the server goes on, and
-- takes the lock for nobody, for its whole TTL, while every buyer of the
-- sale waits. The caller sends this on the same connection, behind the
-- attempt (Redis runs one connection's commands in the order they came),
-- so it runs after the attempt, whenever that runs: on one server, under
-- Sentinel, and on a cluster node whose connection did not break (a
-- broken one's abandon fails, or goes out on a new socket in no set order
-- with the old one's; then the lock lasts its TTL, as it did before this
-- script). The fence the attempt
-- drew is not known to a caller that lost its answer, so the nonce alone
-- names it. Compare and delete in one step, as lock_release.lua: a GET and
-- a DEL from the client could delete a lock that changed hands between them.
local current = redis.call('GET', KEYS[1])
local suffix = ':' .. ARGV[1]
if not current or string.sub(current, -#suffix) ~= suffix then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
