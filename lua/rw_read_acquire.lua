-- rw_read_acquire.lua -- take or re-enter the read lock of a read-write lock
-- (Redisson RReadWriteLock's readLock().lock(), RedissonReadLock.tryLockInnerAsync).
-- KEYS[1]  NAME: a hash; 'mode' -> 'read' | 'write', '<uuid>:<tid>' -> read
--          hold count, '<uuid>:<tid>:write' -> write hold count
-- KEYS[2]  this owner's timeout prefix "{NAME}:<uuid>:<tid>:rwlock_timeout"
--          (hold i has the key "<prefix>:i", a string with the hold's lease)
-- KEYS[3]  acquire latch "rlock_acquire_latch:{NAME}:<request id>" (rlock only)
-- ARGV[1]  lease (ms)   ARGV[2] owner id '<uuid>:<tid>'
-- ARGV[3]  the same owner's write field '<uuid>:<tid>:write'   ARGV[4] latch TTL (ms)
-- Reply: nil acquired (or a copy of an applied try: it takes nothing, see
-- below); an integer: the PTTL of NAME (a writer holds it: wait at
-- most that long); -3 this try was undone (never expected); an error reply
-- (nothing written) for a bad argument.
-- Redisson's steps: no mode -> mode=read, field=1, timeout key 1, PEXPIRE NAME
-- lease; mode read, or mode write held by this owner's write field -> HINCRBY,
-- timeout key i, PEXPIRE NAME max(PTTL, lease); else the PTTL.

local lease, ttl = ARGV[1], ARGV[4]
local function ms(v) return #v <= 15 and string.find(v, '^[1-9]%d*$') end
if not ms(lease) then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease) end
if not ms(ttl) then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl) end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end

local seen = redis.call('get', KEYS[3])
if seen and seen ~= '1' then return -3 end
local mode = redis.call('hget', KEYS[1], 'mode')
-- applied once already: never a second hold. A late copy (the owner went on
-- and released) takes nothing; a re-send waits only if a writer holds NAME.
if seen == '1' then
  if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 0
     and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return redis.call('pttl', KEYS[1])
  end
  return nil
end

if mode == false then
  redis.call('set', KEYS[3], '1', 'px', ttl)
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1)
  redis.call('pexpire', KEYS[2] .. ':1', lease)
  redis.call('pexpire', KEYS[1], lease)
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  redis.call('set', KEYS[3], '1', 'px', ttl)
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local key = KEYS[2] .. ':' .. ind
  redis.call('set', key, 1)
  redis.call('pexpire', key, lease)
  local remain = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(remain, tonumber(lease)))
  return nil
end
return redis.call('pttl', KEYS[1])
