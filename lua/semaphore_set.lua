-- semaphore_set.lua -- set a semaphore's permits if it has none yet
-- (Redisson's RSemaphore trySetPermits(p): missing: SET p, publish p, 1;
-- else 0).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_sc:{NAME}"
-- KEYS[3]  request latch "rlock_semaphore_latch:{NAME}:<request id>"
-- ARGV[1]  permits (0 to 10^15)   ARGV[2] publish command   ARGV[3] latch TTL (ms)
-- Reply: 1 set; 0 the semaphore exists (nothing written). A re-send gets the
-- first answer (the latch).

local function num(s)
  return #s <= 15 and (s == '0' or string.find(s, '^[1-9]%d*$')) and tonumber(s)
end
if not num(ARGV[1] or '') then return redis.error_reply('ERR rlock: invalid permits: ' .. tostring(ARGV[1])) end
if not num(ARGV[3] or '') or ARGV[3] == '0' then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[3]))
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
local out = 0
if redis.call('get', KEYS[1]) == false then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  out = 1
end
redis.call('set', KEYS[3], out, 'px', ARGV[3])
return out
