-- lock_acquire.lua: take the lock if it is free, in one atomic step.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter of this lock (never expires, only grows)
-- ARGV[1]  time to live in milliseconds
-- ARGV[2]  the caller's name and a random nonce, as '<holder>:<nonce>'
--
-- Returns the fencing token (an integer) on success, or nil if the lock is held.
--
-- The article's bug this fixes: they ran SETNX and then EXPIRE as two commands.
-- A process that died between the two left a lock with no TTL that nobody
-- could ever take again. Here the key is created with its TTL in one SET, and
-- the fencing token is drawn in the same script, so no caller can observe a
-- lock without a TTL or a token handed out twice.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return nil
end
local fence = redis.call('INCR', KEYS[2])
-- The value names the holder: token, name and nonce. Release and extend
-- compare the whole of it.
redis.call('SET', KEYS[1], fence .. ':' .. ARGV[2], 'PX', ARGV[1])
return fence
