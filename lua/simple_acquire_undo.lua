-- simple_acquire_undo.lua -- give back the simple lock an acquire may have
-- taken when the client never saw its reply (timed out, connection lost) or
-- no longer wants it (cancelled).
-- KEYS[1]  NAME   KEYS[2] channel "rlock_simple__channel:{NAME}"
-- KEYS[3]  the acquire latch of that request
-- ARGV[1]  unlock message ('0')   ARGV[2] token (owner id)   ARGV[3] publish command
-- ARGV[4]  latch TTL (ms)
-- ARGV[5]  the holds the client knows the token has without this request
--          (0 or 1); -1: trust the latch only
-- Reply: 1 the acquire had been applied: the lock given back;
--        0 it had not: a tombstone now stops it from ever applying;
--        2 already undone (a re-send of this undo);
--        an error reply (nothing written) when an argument is invalid.
-- Without a latch the request was never applied, or it was applied and its
-- latch expired: then a key holding the token that the client does not
-- count (ARGV[5] 0) is that request's hold, given back.

local ttl = ARGV[4]
if not (string.match(ttl, '^[1-9]%d*$') and #ttl <= 15) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
local keep = ARGV[5] or '-1'
if not (keep == '-1' or (string.match(keep, '^%d+$') and #keep <= 15)) then
  return redis.error_reply('ERR rlock: invalid hold count: ' .. keep)
end
keep = tonumber(keep)
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

-- delete the lock if it holds the token (and wake a waiter); true if it did
local function give_back()
  if redis.call('type', KEYS[1]).ok ~= 'string' or redis.call('get', KEYS[1]) ~= ARGV[2] then
    return false
  end
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  return true
end

local latch = redis.call('get', KEYS[3])
if latch == 'undone' or latch == 'x' then
  return 2
end
if latch == '1' then
  redis.call('set', KEYS[3], 'undone', 'px', ttl)
  give_back()
  return 1 -- (if the lock is gone already, its lease ran out)
end

redis.call('set', KEYS[3], 'x', 'px', ttl)
if keep == 0 and give_back() then
  return 1
end
return 0
