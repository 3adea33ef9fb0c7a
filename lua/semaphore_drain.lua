-- semaphore_drain.lua -- take every available permit (Redisson's RSemaphore
-- drainPermits: missing: 0; else SET NAME 0, which drops any TTL, and reply
-- the old value; nothing published).
-- KEYS[1]  NAME   KEYS[2] request latch "rlock_semaphore_latch:{NAME}:<request id>"
-- ARGV[1]  latch TTL (ms)
-- Reply: the count drained (may be negative: Redisson's); a re-send gets the
-- first answer (a second drain would answer 0: the permits would be lost).

local ttl = ARGV[1] or ''
if #ttl > 15 or not string.find(ttl, '^[1-9]%d*$') then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
local first = redis.call('get', KEYS[2])
if first then return tonumber(first) end
local v = redis.call('get', KEYS[1])
local out = 0
if v then
  out = tonumber(v)
  if not out or not string.find(v, '^-?%d+$') then
    return redis.error_reply('ERR rlock: the semaphore does not hold an integer: ' .. v)
  end
  redis.call('set', KEYS[1], 0)
end
redis.call('set', KEYS[2], v or '0', 'px', ttl)
return out
