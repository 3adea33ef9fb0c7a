-- reentrant_force_unlock.lua -- delete a lock whoever holds it, and wake a waiter.
-- KEYS[1]  NAME   KEYS[2] channel "redisson_lock__channel:{NAME}"
-- ARGV[1]  message ('0')   ARGV[2] publish command (publish / spublish; none:
--          the spin lock's, no message)
-- ARGV[3]  '1': delete NAME whatever it holds; '0' (or absent): only if it is a lock
-- Reply: 1 it was a lock: deleted, a waiter woken;  0 no such key;
--        2 (ARGV[3] '1') it was not a lock: deleted anyway;
--        error "NOTLOCK <type>" (ARGV[3] '0') it is not a lock: left as it is;
--        an error reply (nothing written) when an argument is invalid.

-- A lock is a hash of owner id -> hold count (one owner at a time; a few
-- fields at most), checked before anything is written. An owner id starts
-- with a client's UUID and a ':' (Redisson's "<uuid>:<thread id>", rlock's
-- "<uuid>:owner-<n>" too); a count is a positive integer. So a hash of
-- integer counters ("views" -> 5) is not a lock.
local OWNER = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x:'
local function is_lock(key, kind)
  if kind ~= 'hash' or redis.call('hlen', key) > 64 then
    return false
  end
  local fields = redis.call('hgetall', key)
  for i = 1, #fields, 2 do
    if not string.match(fields[i], OWNER) or not string.match(fields[i + 1], '^[1-9]%d*$') then
      return false
    end
  end
  return true
end

-- the publish command in any case (Redisson sends PUBLISH or SPUBLISH; the spin lock
-- none: nothing is published)
local pubcmd = string.lower(ARGV[2] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' and pubcmd ~= 'none' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[2])
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if pubcmd ~= 'none' and redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[2] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end
local any_type = ARGV[3] or '0'
if any_type ~= '0' and any_type ~= '1' then
  return redis.error_reply('ERR rlock: invalid any-type flag: ' .. any_type)
end

local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
local lock = is_lock(KEYS[1], kind)
if not lock and any_type ~= '1' then
  return redis.error_reply('NOTLOCK ' .. kind)
end
redis.call('del', KEYS[1])
if ARGV[2] ~= 'none' then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
end
if lock then
  return 1
end
return 2
