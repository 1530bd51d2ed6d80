-- lock_extend.lua: give the lock a new time to live, only if the caller holds it.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's value ("token:holder:nonce")
-- ARGV[2]  the new time to live in milliseconds
--
-- Returns 1 extended, 0 expired, -1 not the owner.
--
-- The article's bug this fixes: its expire() extended whatever lock was
-- under the name, so a holder that had lost its lock could prolong the new
-- owner's. Same compare-first
-- rule as release, in one atomic step.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current ~= ARGV[1] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
