-- simple_unlock.lua -- release a simple lock: compare-and-delete (the key is
-- deleted only while it holds the caller's token, as redis-py, node-redlock
-- and redsync release), then tell rlock's waiters.
-- KEYS[1]  NAME   KEYS[2] channel "rlock_simple__channel:{NAME}"
-- KEYS[3]  unlock latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  message ('0')   ARGV[2] token (owner id)
-- ARGV[3]  publish command (publish / spublish)   ARGV[4] latch TTL (ms)
-- Reply: 1 released (key deleted, nobody subscribed); 2 released and the
--        message reached subscribers (waiters exist: handoff); nil the key
--        does not hold this token (expired, or another holder's now): left
--        as it is; an error reply (nothing written) when an argument is invalid.
-- The message is rlock's addition: the other libraries neither send nor
-- listen for it (their waiters poll), rlock's waiters also poll (kinds/simple.c).
-- A re-sent request gets its first answer (the latch).

if not (string.match(ARGV[4], '^[1-9]%d*$') and #ARGV[4] <= 15) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ARGV[4])
end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty token') end
-- the publish command in any case (Redisson sends PUBLISH or SPUBLISH)
local pubcmd = string.lower(ARGV[3] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[3])
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[3] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end

local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done) -- ('n': nil)
end
if redis.call('type', KEYS[1]).ok ~= 'string' or redis.call('get', KEYS[1]) ~= ARGV[2] then
  -- not held: nil, stored too ('n'), so that a late copy of this request never
  -- deletes a hold the owner takes after this answer (same token)
  redis.call('set', KEYS[3], 'n', 'px', ARGV[4])
  return nil
end
redis.call('del', KEYS[1])
local released = 1
if redis.call(ARGV[3], KEYS[2], ARGV[1]) > 0 then
  released = 2
end
redis.call('set', KEYS[3], released, 'px', ARGV[4])
return released
