-- semaphore_acquire_undo.lua -- give back what a try of semaphore_acquire.lua
-- whose answer was lost took, and stop a late copy of it from ever applying.
-- KEYS[1]  NAME   KEYS[2] channel "redisson_sc:{NAME}"
-- KEYS[3]  the try's request latch
-- KEYS[4]  the queue "rlock_semaphore_queue:{NAME}"   KEYS[5] the deadlines
--          "rlock_semaphore_timeout:{NAME}" (semaphore_acquire.lua)
-- ARGV[1]  permits (those the try asked for)   ARGV[2] publish command
--          (publish / spublish)   ARGV[3] latch TTL (ms)
-- ARGV[4]  the waiter ("<id>:<permits>")   ARGV[5] '1': it leaves the queue
--          (its wait ended); '0': it stays (it tries again)
-- Reply: 1 the try had taken its permits: given back (INCRBY, the new count
-- published, as a release does); 0 it had not: a tombstone ('u') planted;
-- 2 undone already. Safe to send again. A waiter that leaves the queue
-- while permits are there publishes the count: those behind it may take
-- them now, and no release would wake them.

local function num(s)
  return #s <= 15 and string.find(s, '^[1-9]%d*$') and tonumber(s)
end
if not num(ARGV[1] or '') then return redis.error_reply('ERR rlock: invalid permits: ' .. tostring(ARGV[1])) end
if not num(ARGV[3] or '') then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[3])) end
local pub = string.lower(ARGV[2] or '')
if pub ~= 'publish' and pub ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[2]))
end

if ARGV[5] ~= '0' and ARGV[5] ~= '1' then return redis.error_reply('ERR rlock: invalid leave flag: ' .. tostring(ARGV[5])) end

-- the message only if this user may publish there (a Redis 7 ACL without
-- the channel): the permits must come back all the same (nothing else
-- would give them back)
local function tell(v)
  if not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[2], KEYS[2], '0') then
    redis.call(ARGV[2], KEYS[2], v)
  end
end

local left = false -- the waiter was in the queue and left it
if ARGV[5] == '1' and (ARGV[4] or '') ~= '' then
  left = redis.call('zrem', KEYS[4], ARGV[4]) == 1
  redis.call('zrem', KEYS[5], ARGV[4])
end
local latch = redis.call('get', KEYS[3])
local r = 0
if latch == 'u' then
  r = 2
else
  redis.call('set', KEYS[3], 'u', 'px', ARGV[3])
  if latch == '1' then
    tell(redis.call('incrby', KEYS[1], ARGV[1]))
    return 1
  end
end
if left and redis.call('exists', KEYS[4]) == 1 then
  local v = tonumber(redis.call('get', KEYS[1]) or '0')
  if v and v > 0 then tell(v) end
end
return r
