-- latch_count_down.lua -- count a count-down latch down by one (Redisson's
-- RCountDownLatch countDown: v = DECR; v <= 0: DEL; v == 0: publish 0, which
-- opens the latch; a missing key becomes -1 and is deleted, nothing published).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_countdownlatch__channel__{NAME}"
-- KEYS[3]  request latch "rlock_countdown_latch:{NAME}:<request id>"
-- ARGV[1]  message ('0')   ARGV[2] publish command   ARGV[3] latch TTL (ms)
-- Reply: the count left (0 when it reached zero or was missing). A re-send
-- gets the first answer and counts nothing (Redisson's countDown is sent
-- without retry: rlock re-sends, and each call counts once).

local ttl = ARGV[3] or ''
if #ttl > 15 or not string.find(ttl, '^[1-9]%d*$') then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
local pub = string.lower(ARGV[2] or '')
if pub ~= 'publish' and pub ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[2]))
end

-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[2], '0') then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[2] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end
local first = redis.call('get', KEYS[3])
if first then return tonumber(first) end
local v = redis.call('decr', KEYS[1])
if v <= 0 then redis.call('del', KEYS[1]) end
if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end
if v < 0 then v = 0 end
redis.call('set', KEYS[3], v, 'px', ttl)
return v
