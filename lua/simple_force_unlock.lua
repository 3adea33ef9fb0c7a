-- simple_force_unlock.lua -- delete a simple lock whoever holds it, and wake a waiter.
-- KEYS[1]  NAME   KEYS[2] channel "rlock_simple__channel:{NAME}"
-- ARGV[1]  message ('0')   ARGV[2] publish command
-- ARGV[3]  '1': delete NAME whatever it holds; '0' (or absent): only if it is a lock
-- Reply: 1 it was a lock (a string): deleted, a waiter woken;  0 no such key;
--        2 (ARGV[3] '1') it was not a lock: deleted anyway;
--        error "NOTLOCK <type>" (ARGV[3] '0') it is not a lock: left as it is;
--        an error reply (nothing written) when an argument is invalid.
-- the publish command in any case (Redisson sends PUBLISH or SPUBLISH)
local pubcmd = string.lower(ARGV[2] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[2])
end
local any_type = ARGV[3] or '0'
if any_type ~= '0' and any_type ~= '1' then
  return redis.error_reply('ERR rlock: invalid any-type flag: ' .. any_type)
end

local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'string' and any_type ~= '1' then
  return redis.error_reply('NOTLOCK ' .. kind)
end
redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
if kind == 'string' then
  return 1
end
return 2
