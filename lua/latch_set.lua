-- latch_set.lua -- set a count-down latch's count if it has none (Redisson's
-- RCountDownLatch trySetCount(c): missing: SET c (no TTL), publish 1 (new
-- count: close the latch), 1; else 0).
-- KEYS[1]  NAME: a string integer, the count
-- KEYS[2]  channel "redisson_countdownlatch__channel__{NAME}" (braces always)
-- KEYS[3]  request latch "rlock_countdown_latch:{NAME}:<request id>"
-- ARGV[1]  message ('1')   ARGV[2] count (1 to 10^15)
-- ARGV[3]  publish command (publish / spublish)   ARGV[4] latch TTL (ms)
-- Reply: 1 set; 0 it exists (nothing written). A re-send gets the first answer.

local function num(s)
  return #s <= 15 and string.find(s, '^[1-9]%d*$') and tonumber(s)
end
if not num(ARGV[2] or '') then return redis.error_reply('ERR rlock: invalid count: ' .. tostring(ARGV[2])) end
if not num(ARGV[4] or '') then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[4])) end
local pub = string.lower(ARGV[3] or '')
if pub ~= 'publish' and pub ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[3]))
end

-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[2], '0') then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[3] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end
local first = redis.call('get', KEYS[3])
if first then return tonumber(first) end
local out = 0
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[2])
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  out = 1
end
redis.call('set', KEYS[3], out, 'px', ARGV[4])
return out
