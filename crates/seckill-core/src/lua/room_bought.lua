-- room_bought.lua: a buyer's admission bought a unit; it is spent.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master and never spans two sales:
-- KEYS[1]  the room's admitted: ZSET buyer -> admission's end
-- KEYS[2]  the room's bought: SET of buyers whose admission bought
-- KEYS[3]  the room's state: HASH, whose expiry (set by room_visit.lua
--          from the sale's end) the bought set is given when it is made
-- KEYS[4]  the sale's holds: HASH buyer -> order id
-- ARGV[1]  the buyer
--
-- The race this prevents: remove the buyer from the admitted, then mark
-- them as having bought, as two commands, and a visit between the two
-- would find the buyer neither admitted nor done, and could not tell
-- them where they stand; with the mark first, for a moment the buyer
-- would count against `max_active` although they bought. One script
-- moves the buyer from one to the other at once, freeing their place
-- among the active for the next in line.
--
-- A buyer the holds hash names is marked there already (every strategy
-- writes it with the take): the bought set takes them only once their unit
-- comes back (unit_return.lua), so that no buyer is in both and the
-- room's figures count each once (waiting_room.rs: figures).
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then
  return 0
end
local added = redis.call('SADD', KEYS[2], ARGV[1])
local ttl = redis.call('PTTL', KEYS[3])
if ttl > 0 and redis.call('PTTL', KEYS[2]) == -1 then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return added
