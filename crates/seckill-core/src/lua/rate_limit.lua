-- rate_limit.lua: may one more request of this client go through now?
-- GCRA (the generic cell rate algorithm): a leaky bucket kept as one number.
--
-- KEYS[1]  the client's key (its IP, or its buyer id)
-- ARGV[1]  microseconds between requests at the steady rate
-- ARGV[2]  requests allowed at once beyond the steady rate (the burst)
--
-- Returns {1, 0} when the request may go through, or {0, us} when it must
-- wait us microseconds first. (Microseconds, so that rates above 1,000 a
-- second, and between 500 and 1,000, keep their own interval.)
--
-- The key holds the "theoretical arrival time": when the client's next
-- request would be due if it sent at exactly the steady rate. A request is
-- allowed while that time is no more than a burst's worth ahead of now.
-- The race this prevents: read the time, decide, write it back as three
-- commands, and two instances serving the same client would both read the
-- same time and both let a request through; one script decides for every
-- instance at once. The time is Redis', so instances whose clocks disagree
-- agree on the limit.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
if tat - now > tolerance then
  return {0, tat - now - tolerance}
end
local next_tat = tat + interval
-- The numbers as integers' text (queue_lib.lua: int).
local expires = math.floor((next_tat - now) / 1000) + 1
redis.call('SET', KEYS[1], int(next_tat), 'PX', int(expires))
return {1, 0}
