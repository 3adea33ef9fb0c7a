-- rw_read_unlock.lua -- release one read hold (RedissonReadLock.unlockInnerAsync).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_rwlock:{NAME}"
-- KEYS[3]  this owner's timeout prefix "{NAME}:<uuid>:<tid>:rwlock_timeout"
-- KEYS[4]  key prefix "{NAME}" (NAME itself when it holds '{'): other owners'
--          timeout keys are "<key prefix>:<field>:rwlock_timeout:<i>"
-- KEYS[5]  unlock latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  message ('0')   ARGV[2] owner id '<uuid>:<tid>'
-- ARGV[3]  publish command   ARGV[4] latch TTL (ms)
-- Reply (for this owner): 0 its read holds remain; 1 its last read hold is
-- released (the lock may still be held by others); 2 the same, and NAME was
-- deleted and its message reached a subscriber; nil it holds no read lock.
-- A re-send gets the first answer from the latch ('n': nil).
-- Redisson's steps: latch; no mode -> publish 0, nil; no field -> nil;
-- HINCRBY -1 (HDEL at 0), DEL the hold's timeout key (LIFO); if other fields
-- remain: NAME's TTL becomes the longest remaining timeout key's PTTL, or
-- with none alive it stays only in write mode; else DEL NAME (zombie fields
-- of dead owners with it) and publish 0. (Redisson answers 0/1 for the lock,
-- rlock for the owner: the steps are the same.) rlock's changes: in write
-- mode NAME's TTL is never shortened (the write lease stands); in read mode a
-- TTL made shorter is published ('0'), so parked waiters wait for the new one.

local ttl = ARGV[4]
if not (#ttl <= 15 and string.find(ttl, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[3])
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[3] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end

local seen = redis.call('get', KEYS[5])
if seen then
  if seen == 'n' then return nil end
  return tonumber(seen)
end

local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  redis.call('set', KEYS[5], 'n', 'px', ttl)
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  redis.call('set', KEYS[5], 'n', 'px', ttl)
  return nil
end

local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if counter == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
local out = counter > 0 and 0 or 1

if redis.call('hlen', KEYS[1]) > 1 then
  local max_remain = -3
  local fields = redis.call('hkeys', KEYS[1])
  for _, field in ipairs(fields) do
    local n = tonumber(redis.call('hget', KEYS[1], field))
    if type(n) == 'number' then
      for i = n, 1, -1 do
        local remain = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
        max_remain = math.max(remain, max_remain)
      end
    end
  end
  if max_remain == 0 then max_remain = 1 end -- (rlock) PTTL 0: a hold alive to the end of this ms, not gone
  -- (rlock) in write mode the write hold's TTL stands: a read hold may only
  -- lengthen it (Redisson's step sets it to the read holds', which can end
  -- the write lease early and let a second writer in)
  if mode == 'write' then
    local cur = redis.call('pttl', KEYS[1])
    if max_remain > 0 and cur >= 0 and max_remain > cur then redis.call('pexpire', KEYS[1], max_remain) end
    redis.call('set', KEYS[5], out, 'px', ttl)
    return out
  end
  if max_remain > 0 then
    -- (rlock) a shorter TTL is told on the channel: waiters parked on the
    -- old one try again and wait for the new one (a dead reader's lease)
    local cur = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], max_remain)
    if cur < 0 or max_remain < cur then redis.call(ARGV[3], KEYS[2], ARGV[1]) end
    redis.call('set', KEYS[5], out, 'px', ttl)
    return out
  end
end

-- NAME is deleted: this owner's remaining holds (timed out) go with it
redis.call('del', KEYS[1])
out = redis.call(ARGV[3], KEYS[2], ARGV[1]) > 0 and 2 or 1
redis.call('set', KEYS[5], out, 'px', ttl)
return out
