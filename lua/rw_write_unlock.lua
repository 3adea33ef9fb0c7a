-- rw_write_unlock.lua -- release one write hold (RedissonWriteLock.unlockInnerAsync).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_rwlock:{NAME}"
-- KEYS[3]  unlock latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  message ('1': wakes every waiter)   ARGV[2] TTL (ms) to keep while
--          write holds remain   ARGV[3] owner's write field '<uuid>:<tid>:write'
-- ARGV[4]  publish command   ARGV[5] latch TTL (ms)
-- Reply: 0 write holds remain; 1 the last write hold released; 2 the same and
-- the message reached a subscriber; nil this owner holds no write lock. A
-- re-send gets the first answer from the latch ('n': nil).
-- Redisson's steps: latch; no mode -> publish 1, nil; mode write: no field ->
-- nil; HINCRBY -1; > 0 -> PEXPIRE ARGV[2]; else HDEL, and DEL NAME + publish 1
-- when only 'mode' is left, else mode=read (a downgrade: the owner's read
-- holds remain). rlock also publishes 1 on the downgrade, so waiting readers
-- enter at once (Redisson's wait for their TTL timer); mode read -> nil.
-- rlock: write holds left -> PEXPIRE max(ARGV[2], the owner's read holds' PTTL);
-- a downgrade sets NAME's TTL to the read holds' longest PTTL (DEL: none alive).

local lease, ttl = ARGV[2], ARGV[5]
if not (#ttl <= 15 and string.find(ttl, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
if not (#lease <= 15 and string.find(lease, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
if ARGV[3] == '' then return redis.error_reply('ERR rlock: empty owner id') end
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[4])
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[4], KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[4] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end

local seen = redis.call('get', KEYS[3])
if seen then
  if seen == 'n' then return nil end
  return tonumber(seen)
end

local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  redis.call('set', KEYS[3], 'n', 'px', ttl)
  return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  redis.call('set', KEYS[3], 'n', 'px', ttl)
  return nil
end
-- (rlock) the longest PTTL of the read holds' timeout keys (in write mode
-- only the writer reads); -3 when none is alive
local function read_remain()
  local prefix = string.find(KEYS[1], '{', 1, true) and KEYS[1] or ('{' .. KEYS[1] .. '}')
  local max_remain = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local c = field ~= ARGV[3] and tonumber(redis.call('hget', KEYS[1], field))
    if c then
      for i = c, 1, -1 do
        max_remain = math.max(max_remain, redis.call('pttl', prefix .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if max_remain == 0 then max_remain = 1 end -- (rlock) PTTL 0: a hold alive to the end of this ms, not gone
  return max_remain
end

local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
  -- (rlock) the TTL is at least the owner's read holds': Redisson's PEXPIRE
  -- to the write lease could end a read hold early and let a writer in
  -- beside the reader after the downgrade
  redis.call('pexpire', KEYS[1], math.max(tonumber(lease), read_remain()))
  redis.call('set', KEYS[3], '0', 'px', ttl)
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
  -- (rlock) the downgrade leaves NAME the read holds' TTL (Redisson keeps the
  -- write lease's: a dead reader would keep writers out that long), or
  -- deletes it when no read hold is alive
  local remain, cur = read_remain(), redis.call('pttl', KEYS[1])
  if remain <= 0 then
    redis.call('del', KEYS[1])
  elseif cur < 0 or remain < cur then
    redis.call('pexpire', KEYS[1], remain)
  end
end
local out = redis.call(ARGV[4], KEYS[2], ARGV[1]) > 0 and 2 or 1
redis.call('set', KEYS[3], out, 'px', ttl)
return out
