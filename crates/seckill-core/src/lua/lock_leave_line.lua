-- lock_leave_line.lua: give back a place in the lock's line, only if it is
-- still the caller's.
--
-- KEYS[1]  the lock's line (keys::lock_line)
-- ARGV[1]  the caller's place id, as given to lock_acquire.lua
--
-- Returns 1 if the place was the caller's and is given back, 0 if not.
--
-- Why: a waiter that stops waiting without the lock (it gave up, or its
-- deadline passed) would otherwise hold the lock back from everybody else
-- until its place lapses.
--
-- The race this prevents: a GET and then a DEL from the client could
-- delete the place of a waiter who took it between the two. Compare and
-- delete are one step, like lock_release.lua.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
