-- lock_acquire.lua: take the lock if it is free and nobody else is next in
-- line for it, in one atomic step.
--
-- KEYS are one lock's, under one hash tag (keys.rs: a sale's lock has the
-- sale's, the deadline sweep's lock its own), so the script runs on one
-- Redis Cluster master and never spans two sales:
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter of this lock (never expires, only grows)
-- KEYS[3]  the lock's line: the one waiter next in line (keys::lock_line)
-- KEYS[4]  this attempt's abandon mark: exists once the attempt was
--          abandoned (keys::lock_abandoned, written by lock_abandon.lua)
-- ARGV[1]  time to live in milliseconds
-- ARGV[2]  the caller's name and a random nonce, as '<holder>:<nonce>'
-- ARGV[3]  the caller's place in line: an id the caller keeps for all its
--          attempts of one wait, or '' for a caller that asks for no place
--          (a single attempt, or a waiter that is not told of releases:
--          a lock kept for it would stand idle while it sleeps)
-- ARGV[4]  how long a place in line is kept, in milliseconds, without the
--          waiter coming back for it
--
-- Returns the fencing token (an integer) on success, or nil if the lock is
-- held or promised to the waiter next in line, or if this attempt was
-- abandoned before it ran.
--
-- The article's bug this fixes: they ran SETNX and then EXPIRE as two commands.
-- A process that died between the two left a lock with no TTL that nobody
-- could ever take again. Here the key is created with its TTL in one SET, and
-- the fencing token is drawn in the same script, so no caller can observe a
-- lock without a TTL or a token handed out twice.
--
-- The race the line prevents: the holder releases and, on the same
-- instance, the next pass asks for the lock again at once, one round trip
-- later. A waiter on another instance learns of the release a pub/sub
-- message later, so it loses that race every time, and waits until it
-- gives up (busy) while one instance sells alone. So the first waiter who
-- finds the lock held takes the place in line, and a free lock goes to it
-- first. Only one place: enough to make two contenders take turns, the
-- case of one sale's lock, where each instance sends one contender (its
-- lane's leader); a third contender races for the place as before. A
-- waiter that keeps waiting renews its place at every attempt, and one that
-- stops waiting gives it back (lock_leave_line.lua); the place of a waiter
-- that died lapses after ARGV[4] ms.
--
-- And the race the abandon mark prevents: an attempt whose answer was
-- lost may reach Redis after its caller gave it up, and after the
-- abandon its caller sent (lock.rs): on a cluster node's connection that
-- broke, the abandon goes out on a new socket in no set order with the
-- old one's, and one that could not be sent at once is sent again from
-- the pool later. An abandon that ran first finds no lock to delete; the
-- attempt, landing after it, would take the lock for nobody, for its
-- whole TTL, while every buyer of the sale waits. So the abandon leaves
-- a mark named after the attempt's nonce, and an attempt it marks takes
-- nothing, whichever of the two runs first.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return nil
end
local next_in_line = redis.call('GET', KEYS[3])
local mine = ARGV[3] ~= '' and next_in_line == ARGV[3]
if redis.call('EXISTS', KEYS[1]) == 1 or (next_in_line and not mine) then
  if mine then
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  elseif ARGV[3] ~= '' and not next_in_line then
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
  end
  return nil
end
if mine then
  redis.call('DEL', KEYS[3])
end
local fence = redis.call('INCR', KEYS[2])
-- The value names the holder: token, name and nonce. Release and extend
-- compare the whole of it.
redis.call('SET', KEYS[1], fence .. ':' .. ARGV[2], 'PX', ARGV[1])
return fence
