-- queue_top.lua: peek at the jobs that are due, without taking them.
--
-- KEYS[1]  due
-- ARGV[1]  how many at most
--
-- Returns a flat list: id, due time (ms), id, due time, ... oldest first.
-- No race to prevent: it only reads. A script only so that "due" is judged
-- by the Redis clock.
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now_ms()), 'WITHSCORES', 'LIMIT', '0', ARGV[1])
