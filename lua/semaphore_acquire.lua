-- semaphore_acquire.lua -- take permits of a semaphore (Redisson's RSemaphore
-- tryAcquire(p): the value is the available count, DECRBY p when it is >= p),
-- in the order rlock's waiters came (rlock's queue; Redisson has none).
-- KEYS[1]  NAME: a string integer, the available permits (may be negative;
--          missing = 0)
-- KEYS[2]  request latch "rlock_semaphore_latch:{NAME}:<request id>"
-- KEYS[3]  the queue "rlock_semaphore_queue:{NAME}": a zset, waiter -> its
--          place: the server's time when it came (µs; each above the last)
-- KEYS[4]  the deadlines "rlock_semaphore_timeout:{NAME}": a zset, waiter ->
--          the server ms after which it counts as gone
-- A waiter is "<id>:<permits it asks>".
-- ARGV[1]  permits (1 to 10^15)   ARGV[2] latch TTL (ms)
-- ARGV[3]  the waiter id (1 to 64 bytes of [0-9a-z])
-- ARGV[4]  the waiter's slot (ms): a queued waiter that does not try again
--          within it counts as gone
-- ARGV[5]  'q': queue when it cannot take; 't': a try only (never queues)
-- ARGV[6]  fair after (ms, >= 0): a waiter that came this long ago holds
--          its permits against every try behind it
-- Reply: 1 taken; 0 cannot take (a try only: nothing written); -3 this
-- request was undone (semaphore_acquire_undo.lua): it never applies;
-- {0, ms, place}: queued (or still queued) at that place, try again within
-- ms at most or when a release's message comes; an error reply (nothing
-- written) for a bad argument or a NAME that is not an integer.
-- The rule: a caller takes when the permits left after every waiter ahead of
-- it that came at least "fair after" ago took what it asks still cover its
-- own: waiters served in order once they waited that long (with 0, Java's
-- fair Semaphore); before, tries compete (Go's sync.Mutex: its starvation
-- mode after 1 ms). Waiters
-- whose deadline passed are taken out first (never the caller: it is
-- asking). Redisson's clients do not read the queue: they take whenever the
-- count covers them. The latch (rlock's) makes a re-sent request take its
-- permits once.

local function num(s)
  return #s <= 15 and string.find(s, '^[1-9]%d*$') and tonumber(s)
end
local p = num(ARGV[1] or '')
if not p then return redis.error_reply('ERR rlock: invalid permits: ' .. tostring(ARGV[1])) end
if not num(ARGV[2] or '') then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[2])) end
local id = ARGV[3] or ''
if #id < 1 or #id > 64 or string.find(id, '[^0-9a-z]') then
  return redis.error_reply('ERR rlock: invalid waiter id: ' .. id)
end
local slot = num(ARGV[4] or '')
if not slot then return redis.error_reply('ERR rlock: invalid waiter slot (ms): ' .. tostring(ARGV[4])) end
local mode = ARGV[5]
if mode ~= 'q' and mode ~= 't' then return redis.error_reply('ERR rlock: invalid mode: ' .. tostring(mode)) end
local after = ARGV[6] == '0' and 0 or num(ARGV[6] or '')
if not after then return redis.error_reply('ERR rlock: invalid fair-after (ms): ' .. tostring(ARGV[6])) end

local latch = redis.call('get', KEYS[2])
if latch == '1' then
  return 1 -- a re-send of a request that took its permits already
elseif latch then
  return -3 -- undone by the client: never apply it
end
local v = redis.call('get', KEYS[1])
local n = 0
if v then
  n = tonumber(v)
  if not n or not string.find(v, '^-?%d+$') then
    return redis.error_reply('ERR rlock: the semaphore does not hold an integer: ' .. v)
  end
end

local me = id .. ':' .. ARGV[1]
local t = redis.call('time')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)

-- Waiters gone (deadline passed) leave the queue; the caller never does.
local gone = redis.call('zrangebyscore', KEYS[4], '-inf', '(' .. now, 'limit', 0, 100)
for i = #gone, 1, -1 do
  if gone[i] == me then table.remove(gone, i) end
end
if #gone > 0 then
  redis.call('zrem', KEYS[3], unpack(gone))
  redis.call('zrem', KEYS[4], unpack(gone))
end

-- What the waiters ahead of the caller that waited long enough ask, as far
-- as it matters: it takes when n - ahead >= p.
local place = redis.call('zscore', KEYS[3], me)
local fits = n >= p
if fits then
  local top = string.format('%d', now_us - after * 1000) -- (never '%.14g': µs need 16 digits)
  if place and tonumber(place) <= tonumber(top) then top = '(' .. place end
  local ahead, from = 0, 0
  while fits do
    local w = redis.call('zrangebyscore', KEYS[3], '-inf', top, 'limit', from, 100)
    for _, m in ipairs(w) do
      ahead = ahead + (tonumber(string.match(m, ':(%d+)$')) or 1)
      if n - ahead < p then
        fits = false
        break
      end
    end
    if #w < 100 then break end
    from = from + 100
  end
end

if fits then
  redis.call('decrby', KEYS[1], p)
  redis.call('set', KEYS[2], '1', 'px', ARGV[2])
  if place then
    redis.call('zrem', KEYS[3], me)
    redis.call('zrem', KEYS[4], me)
  end
  return 1
end
if mode == 't' then return 0 end

-- Queued: at the tail if new, its deadline moved to now + slot.
if not place then
  local last = tonumber(redis.call('zrange', KEYS[3], -1, -1, 'withscores')[2] or '0')
  place = string.format('%d', now_us > last and now_us or last + 1)
  redis.call('zadd', KEYS[3], place, me)
end
redis.call('zadd', KEYS[4], string.format('%d', now + slot), me)
-- The keys live 2 slots past the last try, the longest slot's: never
-- shortened by a client with a shorter slot (they would expire before the
-- deadline of a waiter with a longer one, its place lost).
for k = 3, 4 do
  if redis.call('pttl', KEYS[k]) < 2 * slot then redis.call('pexpire', KEYS[k], 2 * slot) end
end
-- Try again within half a slot (its deadline stays ahead); sooner when the
-- permits are there but a waiter ahead holds them back: when the first
-- other deadline passes (a dead waiter's place is freed then).
local wait = math.floor(slot / 2)
if n >= p then
  local first = redis.call('zrange', KEYS[4], 0, 1, 'withscores')
  for i = 1, #first, 2 do
    if first[i] ~= me then
      local d = tonumber(first[i + 1]) - now + 1
      if d < wait then wait = d end
      break
    end
  end
end
if wait < 1 then wait = 1 end
return {0, wait, tonumber(place)}
