-- room_visit.lua: a buyer joins a sale's waiting room or asks where they
-- stand; on the way, the room admits whoever's turn has come.
--
-- KEYS are one sale's, under its hash tag {sale:ID} (keys.rs), so the
-- script runs on one Redis Cluster master and never spans two sales:
-- KEYS[1]  the room's line: ZSET buyer -> place (lowest first in)
-- KEYS[2]  the room's admitted: ZSET buyer -> admission's end (ms, Redis' clock)
-- KEYS[3]  the room's bought: SET of buyers whose admission bought and
--          who hold no unit now (keys.rs: RoomKeys::bought)
-- KEYS[4]  the room's state: HASH (see below)
-- KEYS[5]  the sale's stock: STRING units left (absent: not loaded)
-- KEYS[6]  the room's seen: HASH buyer in line -> when they last visited (ms)
-- KEYS[7]  the sale's holds: HASH buyer -> order id; a buyer here bought
--          (with `lock` and `lua` their admission's only mark)
-- ARGV[1]  the buyer
-- ARGV[2]  1 to join (if not in the room yet), 0 only to ask
-- ARGV[3]  admissions per second at most
-- ARGV[4]  admitted buyers who have neither bought nor run out, at most
-- ARGV[5]  how long an admission lasts, in ms
-- ARGV[6]  when the sale opens, ms since the epoch
-- ARGV[7]  when the sale ends, ms since the epoch (0: never)
-- ARGV[8]  1 for a lottery among those who joined before the open
-- ARGV[9]  the lottery's seed (32 hex digits: 128 bits)
-- ARGV[10] the abandon time, in ms: a buyer in line who has not visited
--          for longer has left the line
-- ARGV[11] the room's grace, in ms: every key of the room expires this
--          long after the sale ends (ARGV[7]; never, for a sale without an
--          end)
-- ARGV[12] buyers in line at most (0: no cap): a join beyond it is refused
-- ARGV[13] how many buyers seen follow (S)
-- ARGV[14..13+S] more buyers seen: those an instance answered from its
--          own view of the room since its last visit (`web/room_view.rs`);
--          each still in line is noted as seen now, as ARGV[1] is
-- ARGV[14+S..] buyers tracked: those an instance answers from its view
--          although they stand where their number alone does not tell
--          (near the head, admitted, a lottery's drawn); each one's
--          standing is returned, as ARGV[1]'s is
--
-- The state hash: `seq` places handed out by arrival; `base` the moment
-- (ms) from which admissions not yet made have accrued; `admitted`,
-- `expired` and `abandoned` totals; `first` the first admission's time;
-- `drawn` how many the lottery drew (those who joined before the open);
-- `told` once the first visit after the open has told the draw's seed;
-- `born` when the line's first place was handed out (ms): the line's
-- generation, which every ticket carries.
--
-- Places (the line's scores, a buyer's number): in a `fifo` room, the
-- arrival order, 1, 2, 3... In a lottery, a buyer who joins before the
-- open is drawn a place at once, from the seed and the buyer alone:
-- 1 + the first 40 bits of SHA1(seed .. ':' .. buyer), below LATE (2^44).
-- So the draw is reproducible and checkable by anyone told the seed (it is
-- logged at the open, and secret before it: nobody can pick ids that draw
-- well), and it costs one hash at the join, never a pass over the line. A
-- buyer who joins after the open gets LATE + their arrival number, behind
-- every drawn one. Two buyers who draw the same place (about one pair in
-- a million joiners) are served in the order of their ids, as a sorted
-- set orders equal scores: the same every time. Places are written with
-- string.format, so that none is rounded on its way to Redis.
--
-- Abandoned: every visit of a buyer in line (a join or a status ask)
-- records when they were seen. When the room admits, a buyer at the head
-- of the line not seen for longer than the abandon time is dropped from
-- the line and counted `abandoned` instead, and the next one is admitted
-- in their place: an admission handed to someone who closed the tab is
-- wasted for everyone behind them. A buyer with no seen entry (one who
-- joined before the room recorded it) is not judged. The work is bounded:
-- at most DROPS_PER_VISIT (200) buyers are dropped in one call, so that a
-- line that everyone left costs Redis at most that many buyers' work a
-- visit, never the whole line at once; the next visits drop the rest.
--
-- Returns {{standing, place-or-expiry, ahead, waiting, closed, admitted,
-- first, now, told, head, drawn, full, active, next_free, born}, tracked}:
-- standing 0 not in the room, 1 waiting
-- (then the buyer's number in the line, the order it is served in, and
-- how many are ahead), 2 admitted (then when the admission ends), 3
-- bought; `waiting` the line's length; `closed` 1 when the sale has sold
-- out or ended; `admitted` and `first` for the observed rate; `told` the
-- number the lottery drew, in the one call that is the first after the
-- open (0 in every other: the caller logs the seed once); `head` the
-- number of the first buyer in line (0: nobody waits); `drawn` how many
-- the lottery drew so far (0 in a `fifo` room); `full` 1 when this call's
-- join was refused because the line holds `max_line` buyers; `active` the
-- admitted buyers who have neither bought nor run out, and `next_free`
-- when the first of their admissions runs out (ms; 0 with none): while
-- `active` is `max_active`, the latest moment a place opens; `born` the
-- line's generation (0 before anyone joined). `tracked` is the tracked
-- buyers' {standing, place-or-expiry, ahead}, three numbers each, in the
-- order asked. `unseen` names the buyers seen (ARGV[14..13+S]) who were
-- not in line: a place Redis lost (a failover under `local` loses the
-- line's tail and keeps its `born`) would else be answered from its
-- ticket's number, "waiting", until the head came near.
--
-- Every step is bounded, whatever the line's length: O(log n) sorted-set
-- commands, at most ADMITS_PER_VISIT admissions, DROPS_PER_VISIT drops
-- and EXPIRES_PER_VISIT expiries a call, and O(log n) a buyer seen or
-- tracked (the caller sends at most 1,000 seen, `room_view.rs`, and
-- 200 tracked). A visit never reads
-- the line.
--
-- The races this prevents: every instance advances the same room. Read
-- the line, pick the next buyers, record them as admitted as separate
-- commands, and two instances asking at once would both admit the same
-- slots (twice the rate, past max_active) or the same buyer twice; a
-- join read-then-added would hand two tabs of one buyer two places; a
-- buyer judged gone from one read of the seen hash and dropped by a later
-- command could visit between the two and be dropped while asking; the
-- tracked buyers' places, read after the look, could show a buyer both
-- in line and admitted, or neither, against the look's head. One
-- script does all of it on one hash tag, on Redis' clock. And a line Redis
-- lost (a flush, a failover under `local`) starts again from number 1: a
-- ticket of the lost line would read as a place in the new one. `born`,
-- written with the first place, tells the two lines apart: an instance
-- answers a ticket from its look only when the ticket's generation is
-- the look's (`web/room_view.rs`).
local line, admitted, bought, state, stock, seen = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local holds = KEYS[7]

-- Whether `who`'s admission bought: they hold a unit, or held one.
local function has_bought(who)
  return redis.call('HEXISTS', holds, who) == 1 or redis.call('SISMEMBER', bought, who) == 1
end
local buyer = ARGV[1]
local join = ARGV[2] == '1'
local rate = tonumber(ARGV[3])
local max_active = tonumber(ARGV[4])
local lasts = tonumber(ARGV[5])
local opens = tonumber(ARGV[6])
local ends = tonumber(ARGV[7])
local lottery = ARGV[8] == '1'
local abandon = tonumber(ARGV[10])
local grace = tonumber(ARGV[11])
local max_line = tonumber(ARGV[12])
local DROPS_PER_VISIT = 200
local ADMITS_PER_VISIT = 1000
local EXPIRES_PER_VISIT = 1000
local LATE = 17592186044416 -- 2^44: a lottery's drawn places are below

local now = now_ms()
-- As text, once, for the commands below (queue_lib.lua: int).
local now_text = int(now)

-- Whether the room holds `who` as admitted: among the admitted, and
-- their end (the score there) not passed on Redis' clock. One whose end
-- passed is not, swept out yet or not, as the purchase's commit judges
-- it: else a buyer refused there (`withdrawn`) could not join again
-- until a visit swept them out.
local function admitted_now(who)
  local until_ms = redis.call('ZSCORE', admitted, who)
  return until_ms and tonumber(until_ms) > now, until_ms
end

local left = tonumber(redis.call('GET', stock) or '1')
local closed = (ends > 0 and now >= ends) or left <= 0

-- Joining: once per buyer, whatever the tabs and refreshes. A buyer who
-- bought, or is admitted, keeps that standing. A full line takes nobody
-- new (`full`), checked in the same step as the join, so that two joins
-- at once cannot both take the last place.
local full = 0
if join and not closed
  and not redis.call('ZSCORE', line, buyer)
  and not admitted_now(buyer)
  and not has_bought(buyer)
  and max_line > 0 and redis.call('ZCARD', line) >= max_line then
  full = 1
elseif join and not closed
  and not redis.call('ZSCORE', line, buyer)
  and not admitted_now(buyer)
  and not has_bought(buyer) then
  redis.call('HSETNX', state, 'born', now_text)
  local place
  if lottery and now < opens then
    place = tonumber(string.sub(redis.sha1hex(ARGV[9] .. ':' .. buyer), 1, 10), 16) + 1
    redis.call('HINCRBY', state, 'drawn', '1')
  else
    place = redis.call('HINCRBY', state, 'seq', '1')
    if lottery then
      place = LATE + place
    end
  end
  redis.call('ZADD', line, string.format('%.0f', place), buyer)
end

-- Seen: a buyer in line who visits is still there (before admitting, so
-- that a buyer asking now is never judged gone).
if redis.call('ZSCORE', line, buyer) then
  redis.call('HSET', seen, buyer, now_text)
end
local seen_to = 13 + tonumber(ARGV[13])
-- The buyers seen who are not in line (admitted since, or their place
-- lost): returned, so that the instance stops answering them by their
-- ticket's number.
local unseen = {}
for i = 14, seen_to do
  if redis.call('ZSCORE', line, ARGV[i]) then
    redis.call('HSET', seen, ARGV[i], now_text)
  else
    unseen[#unseen + 1] = ARGV[i]
  end
end

-- The lottery was drawn as its buyers joined; the first visit after the
-- open says so once, for the caller to log the seed.
local told = 0
if lottery and now >= opens and redis.call('HSETNX', state, 'told', now_text) == 1 then
  told = tonumber(redis.call('HGET', state, 'drawn') or '0')
end

-- Admissions run out; what did not buy in time is counted as expired.
-- (At most EXPIRES_PER_VISIT at once; the next visits sweep the rest.)
local ran_out = redis.call('ZRANGE', admitted, '-inf', now_text, 'BYSCORE', 'LIMIT', '0', int(EXPIRES_PER_VISIT))
local expired = #ran_out
if expired > 0 then
  redis.call('ZREM', admitted, unpack(ran_out))
  redis.call('HINCRBY', state, 'expired', int(expired))
end

-- Admitting: not before the open, not once closed; at most `rate` per
-- second (what accrued since `base`, at most a second's worth), and never
-- more than `max_active` admitted at once.
if not closed and now >= opens then
  local base = tonumber(redis.call('HGET', state, 'base') or opens)
  if base < now - 1000 then
    base = now - 1000
  end
  local accrued = math.floor((now - base) * rate / 1000)
  -- The active are the admitted whose end has not passed: past the
  -- sweep's bound, run-out ones wait in the set for the next visits,
  -- and counted they would keep the line from moving meanwhile.
  local room = max_active - redis.call('ZCOUNT', admitted, '(' .. now_text, '+inf')
  local n = math.min(accrued, room, ADMITS_PER_VISIT)
  if n > 0 then
    -- From the head of the line: the gone are dropped (at most
    -- DROPS_PER_VISIT of them), the others admitted, until `n` are. A
    -- chunk of the head at a time, four calls a chunk (`call_many`), not
    -- four a buyer: a visit admits up to ADMITS_PER_VISIT, and Redis
    -- runs nothing else meanwhile. A chunk is never larger than
    -- the admissions and drops still allowed, so if all of it is gone
    -- the drops stay within their bound, and the admissions never pass
    -- `n`.
    local count, dropped, until_text = 0, 0, int(now + lasts)
    while count < n and dropped < DROPS_PER_VISIT do
      local chunk = math.min(n - count, DROPS_PER_VISIT - dropped)
      local head = redis.call('ZPOPMIN', line, int(chunk))
      if #head == 0 then
        break
      end
      local who = {}
      for i = 1, #head, 2 do
        who[#who + 1] = head[i]
      end
      local last = call_many('HMGET', seen, who)
      call_many('HDEL', seen, who)
      local let_in = {}
      for k, buyer_in_line in ipairs(who) do
        if last[k] and tonumber(last[k]) < now - abandon then
          dropped = dropped + 1
        else
          let_in[#let_in + 1] = until_text
          let_in[#let_in + 1] = buyer_in_line
          count = count + 1
        end
      end
      call_many('ZADD', admitted, let_in)
    end
    if dropped > 0 then
      redis.call('HINCRBY', state, 'abandoned', int(dropped))
    end
    if count > 0 then
      base = base + count * 1000 / rate
      redis.call('HINCRBY', state, 'admitted', int(count))
      redis.call('HSETNX', state, 'first', now_text)
    end
  end
  -- Nobody waiting: nothing accrues for later (a crowd arriving after a
  -- quiet spell is admitted at the rate, not in one burst).
  if redis.call('ZCARD', line) == 0 then
    base = now
  end
  redis.call('HSET', state, 'base', tostring(base))
end

-- Rooms end: each key of the room expires `grace` after the sale's end,
-- set once per key (again only if the end moved), so that a room costs
-- nothing once its buyers can no longer use it. Checked after the writes
-- above, which may have made a key.
if ends > 0 then
  local at = ends + grace
  for _, key in ipairs({line, admitted, bought, state, seen}) do
    local ttl = redis.call('PTTL', key)
    if ttl == -1 or math.abs(now + ttl - at) > 1000 then
      if ttl ~= -2 then
        redis.call('PEXPIREAT', key, int(at))
      end
    end
  end
end

local waiting = redis.call('ZCARD', line)
local totals = redis.call('HMGET', state, 'admitted', 'first')
local admitted_total = tonumber(totals[1] or '0')
local first = tonumber(totals[2] or '0')
local closed_flag = closed and 1 or 0
local first_in_line = redis.call('ZRANGE', line, '0', '0', 'WITHSCORES')
local head = tonumber(first_in_line[2] or '0')
local drawn = tonumber(redis.call('HGET', state, 'drawn') or '0')
local active = redis.call('ZCOUNT', admitted, '(' .. now_text, '+inf')
local soonest = redis.call('ZRANGE', admitted, '(' .. now_text, '+inf', 'BYSCORE', 'LIMIT', '0', '1', 'WITHSCORES')
local next_free = tonumber(soonest[2] or '0')
local born = tonumber(redis.call('HGET', state, 'born') or '0')

local header = {0, 0, 0, waiting, closed_flag, admitted_total, first, now, told,
  head, drawn, full, active, next_free, born}

-- Places by arrival have no gaps (buyers leave the line only at its
-- head), so the buyers ahead are the place minus the head's: no ZRANK,
-- which walks a sorted set of a million in some forty steps. Only a
-- lottery's drawn places, while one of them leads, have gaps.
local gapless = not lottery or head > LATE

-- Where `who` stands: 3 bought, 2 admitted (until), 1 waiting (number,
-- how many ahead), 0 not in the room.
-- The line first: most of the buyers an instance tracks wait there, and
-- are answered with one command. A buyer leaves the line when admitted,
-- the admitted when they buy (with a two-step door, a moment after:
-- admitted until then), and one who bought cannot join, so the order
-- decides nothing but the cost.
local function standing_of(who)
  local place = redis.call('ZSCORE', line, who)
  if place then
    place = tonumber(place)
    if gapless then
      return 1, place, place - head
    end
    return 1, place, redis.call('ZRANK', line, who)
  end
  local held, until_ms = admitted_now(who)
  if held then
    return 2, tonumber(until_ms), 0
  end
  if has_bought(who) then
    return 3, 0, 0
  end
  return 0, 0, 0
end

header[1], header[2], header[3] = standing_of(buyer)
local tracked = {}
for i = seen_to + 1, #ARGV do
  local standing, value, ahead = standing_of(ARGV[i])
  tracked[#tracked + 1] = standing
  tracked[#tracked + 1] = value
  tracked[#tracked + 1] = ahead
end
return {header, tracked, unseen}
