-- semaphore_acquire.lua -- take permits of a semaphore (Redisson's RSemaphore
-- tryAcquire(p): the value is the available count, DECRBY p when it is >= p).
-- KEYS[1]  NAME: a string integer, the available permits (may be negative;
--          missing = 0)
-- KEYS[2]  request latch "rlock_semaphore_latch:{NAME}:<request id>"
-- ARGV[1]  permits (1 to 10^15)   ARGV[2] latch TTL (ms)
-- Reply: 1 taken; 0 too few available (nothing written); -3 this request
-- was undone (semaphore_acquire_undo.lua): it never applies; an error reply
-- (nothing written) for a bad argument or a NAME that is not an integer.
-- Redisson's step is the DECRBY alone; the latch (rlock's) makes a re-sent
-- request (its answer was lost) take its permits once.

local function num(s)
  return #s <= 15 and string.find(s, '^[1-9]%d*$') and tonumber(s)
end
local p = num(ARGV[1] or '')
if not p then return redis.error_reply('ERR rlock: invalid permits: ' .. tostring(ARGV[1])) end
if not num(ARGV[2] or '') then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[2])) end

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
if n >= p then
  redis.call('decrby', KEYS[1], p)
  redis.call('set', KEYS[2], '1', 'px', ARGV[2])
  return 1
end
return 0
