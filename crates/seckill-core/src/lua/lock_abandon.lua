-- lock_abandon.lua: give up a lock attempt whose answer was lost: mark it
-- abandoned, so that it takes nothing if it has not run yet, and delete
-- the lock if it took it already, announcing the release.
--
-- KEYS are one lock's, under one hash tag (keys.rs: a sale's lock has the
-- sale's, the deadline sweep's lock its own), so the script runs on one
-- Redis Cluster master:
-- KEYS[1]  the lock key
-- KEYS[2]  the attempt's abandon mark (keys::lock_abandoned: named after
--          the nonce, beside the lock)
-- ARGV[1]  the attempt's nonce ("holder:uuid", lock.rs): the value
--          lock_acquire.lua sets is "fence:" followed by it
-- ARGV[2]  the channel (not a key) the release is published on
--          (keys::lock_released)
-- ARGV[3]  how long the mark is kept, in ms
--
-- Returns 1 released, 0 not taken by that attempt (the key is gone, or
-- another caller's, or the attempt has not run yet).
--
-- The race this prevents: an attempt sent into a stalled server (or whose
-- reply timed out on the way) is answered as an error, and the caller
-- gives up; the attempt itself still runs when the server goes on, and
-- takes the lock for nobody, for its whole TTL, while every buyer of the
-- sale waits. The abandon may run before or after the attempt: sent on
-- the attempt's own connection it runs after it (Redis runs one
-- connection's commands in the order they came), but that connection may
-- have broken, and then it is sent again on another (lock.rs), in no set
-- order with the attempt. So it does both halves in one step: it marks
-- the attempt abandoned, which the attempt checks before it takes
-- anything (lua/lock_acquire.lua), and deletes the lock if the attempt
-- took it already. Whichever runs first, the attempt holds no lock once
-- both have run. The mark lasts ARGV[3] (far longer than a command is
-- held up on its way), one key an attempt, so none outlives its use.
-- The fence the attempt drew is not known to a caller that lost its
-- answer, so the nonce alone names it. Compare and delete in one step,
-- as lock_release.lua: a GET and a DEL from the client could delete a
-- lock that changed hands between them.
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
local current = redis.call('GET', KEYS[1])
local suffix = ':' .. ARGV[1]
if not current or string.sub(current, -#suffix) ~= suffix then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
