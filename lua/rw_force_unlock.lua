-- rw_force_unlock.lua -- break the read or the write lock of a read-write lock
-- (Redisson's forceUnlock of readLock() / writeLock()).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_rwlock:{NAME}"
-- ARGV[1]  message ('0' read, '1' write)   ARGV[2] publish command
-- ARGV[3]  'read' or 'write'   ARGV[4] '1': delete NAME whatever it holds
-- Reply: 1 NAME was in that mode: deleted, message published; 0 no such key,
-- or the lock is in the other mode (left as it is: Redisson's); 2 (ARGV[4]
-- '1') NAME was not a read-write lock: deleted anyway; error "NOTLOCK <type>"
-- (ARGV[4] '0') not a read-write lock: left as it is.
-- Timeout keys of read holds are left to expire on their own (Redisson's).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[2])
end
if ARGV[3] ~= 'read' and ARGV[3] ~= 'write' then
  return redis.error_reply('ERR rlock: invalid read-write mode: ' .. tostring(ARGV[3]))
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[2] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end
local any_type = ARGV[4] or '0'
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then return 0 end
local mode = kind == 'hash' and redis.call('hget', KEYS[1], 'mode')
if mode ~= 'read' and mode ~= 'write' then
  if any_type ~= '1' then return redis.error_reply('NOTLOCK ' .. kind) end
  redis.call('del', KEYS[1])
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 2
end
if mode ~= ARGV[3] then return 0 end
redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
