-- semaphore_acquire_undo.lua -- give back what a try of semaphore_acquire.lua
-- whose answer was lost took, and stop a late copy of it from ever applying.
-- KEYS[1]  NAME   KEYS[2] channel "redisson_sc:{NAME}"
-- KEYS[3]  the try's request latch
-- ARGV[1]  permits (those the try asked for)   ARGV[2] publish command
--          (publish / spublish)   ARGV[3] latch TTL (ms)
-- Reply: 1 the try had taken its permits: given back (INCRBY, the new count
-- published, as a release does); 0 it had not: a tombstone ('u') planted;
-- 2 undone already. Safe to send again.

local function num(s)
  return #s <= 15 and string.find(s, '^[1-9]%d*$') and tonumber(s)
end
if not num(ARGV[1] or '') then return redis.error_reply('ERR rlock: invalid permits: ' .. tostring(ARGV[1])) end
if not num(ARGV[3] or '') then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[3])) end
local pub = string.lower(ARGV[2] or '')
if pub ~= 'publish' and pub ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[2]))
end

local latch = redis.call('get', KEYS[3])
if latch == 'u' then return 2 end
redis.call('set', KEYS[3], 'u', 'px', ARGV[3])
if latch == '1' then
  local v = redis.call('incrby', KEYS[1], ARGV[1])
  -- the message only if this user may publish there (a Redis 7 ACL without
  -- the channel): the permits must come back all the same (nothing else
  -- would give them back)
  if not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[2], KEYS[2], '0') then
    redis.call(ARGV[2], KEYS[2], v)
  end
  return 1
end
return 0
