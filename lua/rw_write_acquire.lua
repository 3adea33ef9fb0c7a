-- rw_write_acquire.lua -- take or re-enter the write lock of a read-write lock
-- (RedissonWriteLock.tryLockInnerAsync), refusing an upgrade at once.
-- KEYS[1]  NAME (the hash of rw_read_acquire.lua)
-- KEYS[2]  acquire latch "rlock_acquire_latch:{NAME}:<request id>" (rlock only)
-- ARGV[1]  lease (ms)   ARGV[2] owner's write field '<uuid>:<tid>:write'
-- ARGV[3]  latch TTL (ms)
-- ARGV[4]  (rlock only) the same owner's read field '<uuid>:<tid>'
-- Reply: nil acquired (or a copy of an applied try: it takes nothing); an
-- integer: the PTTL of NAME (held by others: wait at
-- most that long); -3 this try was undone (never expected); -4 this owner
-- holds a read lock while the lock is in read mode: an upgrade, refused at
-- once (Redisson waits until the read lease runs out, #4796); an error reply
-- (nothing written) for a bad argument.
-- Redisson's steps: no mode -> mode=write, field=1, PEXPIRE lease; mode write
-- and this field -> HINCRBY, PEXPIRE PTTL + lease (adds: Redisson's); else PTTL.

local lease, ttl = ARGV[1], ARGV[3]
local function ms(v) return #v <= 15 and string.find(v, '^[1-9]%d*$') end
if not ms(lease) then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease) end
if not ms(ttl) then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl) end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end

local seen = redis.call('get', KEYS[2])
if seen and seen ~= '1' then return -3 end
local mode = redis.call('hget', KEYS[1], 'mode')
-- applied once already: never a second hold. A late copy (the owner went on
-- and released) takes nothing; a re-send waits only if others hold NAME.
if seen == '1' then
  if mode == false or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then return nil end
  return redis.call('pttl', KEYS[1])
end

if mode == false then
  redis.call('set', KEYS[2], '1', 'px', ttl)
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], lease)
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('set', KEYS[2], '1', 'px', ttl)
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local current = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], current + tonumber(lease))
  return nil
end
if mode == 'read' and ARGV[4] and ARGV[4] ~= '' and redis.call('hexists', KEYS[1], ARGV[4]) == 1 then
  return -4
end
return redis.call('pttl', KEYS[1])
