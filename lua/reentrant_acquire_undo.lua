-- reentrant_acquire_undo.lua -- give back the hold of an acquire whose reply the
-- client never saw (timed out, connection lost) or no longer wants (cancelled).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_lock__channel:{NAME}"
-- KEYS[3]  the acquire latch of that request
-- ARGV[1]  unlock message ('0')   ARGV[2] owner id   ARGV[3] publish command
--          (publish / spublish; none: the spin lock's, no message)
-- ARGV[4]  latch TTL (ms)
-- ARGV[5]  (optional) the hold count the client knows the owner has (without
--          this request); -1: trust the latch only
-- Reply: 1 the acquire had been applied: one hold given back;
--        0 it had not: a tombstone now stops it from ever applying;
--        2 already undone (a re-send of this undo);
--        an error reply (nothing written) when an argument is invalid.
-- Without a latch the request was never applied, or it was applied and its
-- latch expired: then a count above ARGV[5] is that request's hold, given back.

local ttl = ARGV[4]
if not (string.match(ttl, '^[1-9]%d*$') and #ttl <= 15) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
local keep = ARGV[5] or '-1'
if not (keep == '-1' or (string.match(keep, '^%d+$') and #keep <= 15)) then
  return redis.error_reply('ERR rlock: invalid hold count: ' .. keep)
end
keep = tonumber(keep)
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end
-- the publish command in any case (Redisson sends PUBLISH or SPUBLISH; the spin lock
-- none: nothing is published)
local pubcmd = string.lower(ARGV[3] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' and pubcmd ~= 'none' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[3])
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if pubcmd ~= 'none' and redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[3] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end

-- down to n holds of the owner (0: none); wakes a waiter if the lock is free
local function keep_only(n)
  if n > 0 then
    redis.call('hset', KEYS[1], ARGV[2], n)
    return
  end
  redis.call('hdel', KEYS[1], ARGV[2])
  if redis.call('exists', KEYS[1]) == 0 and ARGV[3] ~= 'none' then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
  end
end

local latch = redis.call('get', KEYS[3])
if latch == 'undone' or latch == 'x' then
  return 2
end
if latch == '1' or (latch and string.sub(latch, 1, 2) == '1:') then -- '1:<token>': the fenced lock's
  redis.call('set', KEYS[3], 'undone', 'px', ttl)
  local held = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0')
  if held > 0 then
    keep_only(held - 1)
  end
  return 1 -- (if the hold is gone already, its lease ran out)
end

redis.call('set', KEYS[3], 'x', 'px', ttl)
local held = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0')
if keep >= 0 and held > keep then
  keep_only(keep)
  return 1
end
return 0
