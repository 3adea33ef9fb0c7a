-- pes_release.lua -- release one permit by its id (Redisson's
-- RPermitExpirableSemaphore tryRelease(id)).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_sc:{NAME}"   KEYS[3] "{NAME}:timeout"
-- KEYS[4]  release latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  permit id (32 lowercase hex)   ARGV[2] now (epoch ms)
-- ARGV[3]  publish command   ARGV[4] latch TTL (ms)
-- Reply: 1 released; 2 released and the message reached a subscriber;
--        0 not held (unknown id); 3 it had expired: given back to the count
--        now, but it was no longer the caller's (Redisson replies false);
--        an error reply (nothing written) when an argument is invalid.
-- Steps as Redisson's: ZREM the id; INCRBY 1; publish the new count. The
-- latch makes a re-sent release (its answer lost) answer as the first did.
if not (#ARGV[1] == 32 and string.match(ARGV[1], '^[0-9a-f]+$')) then
  return redis.error_reply('ERR rlock: invalid permit id: ' .. ARGV[1])
end
local now = tonumber(string.match(ARGV[2], '^%d+$') and ARGV[2] or '')
if not now then return redis.error_reply('ERR rlock: invalid time (ms): ' .. ARGV[2]) end
local pubcmd = string.lower(ARGV[3] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[3]))
end
if not (string.match(ARGV[4], '^[1-9]%d*$') and #ARGV[4] <= 15) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ARGV[4])
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[2], '0') then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[3] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end
local latch = redis.call('get', KEYS[4])
if latch then return tonumber(latch) end

local id = string.gsub(ARGV[1], '..', function(h) return string.char(tonumber(h, 16)) end)
local score = redis.call('zscore', KEYS[3], id)
local out = 0
if score and redis.call('zrem', KEYS[3], id) == 1 then
  local value = redis.call('incrby', KEYS[1], 1)
  local heard = redis.call(ARGV[3], KEYS[2], value)
  if tonumber(score) <= now then
    out = 3
  else
    out = heard > 0 and 2 or 1
  end
end
redis.call('set', KEYS[4], out, 'px', ARGV[4])
return out
