-- semaphore_add.lua -- add (or take away) permits (Redisson's RSemaphore
-- addPermits(p): the value (missing = 0) plus p written with SET, which
-- drops any TTL; the new count published; p may be negative).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_sc:{NAME}"
-- KEYS[3]  request latch "rlock_semaphore_latch:{NAME}:<request id>"
-- ARGV[1]  delta (an integer, |delta| < 10^15)   ARGV[2] publish command
-- ARGV[3]  latch TTL (ms)
-- Reply: the new count (a re-send: the first answer, nothing written).
-- INCRBY then PERSIST leaves what Redisson's GET + SET leaves (the sum, no
-- TTL), without going through a Lua number's text form.

local d = ARGV[1] or ''
if #d > 16 or not (d == '0' or string.find(d, '^-?[1-9]%d*$')) or #(d:gsub('-', '')) > 15 then
  return redis.error_reply('ERR rlock: invalid permits: ' .. d)
end
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
local v = redis.call('incrby', KEYS[1], d)
redis.call('persist', KEYS[1])
redis.call(ARGV[2], KEYS[2], v)
redis.call('set', KEYS[3], v, 'px', ttl)
return v
