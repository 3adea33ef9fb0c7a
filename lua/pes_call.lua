-- pes_call.lua -- the permit-expirable semaphore's queries and settings, as
-- Redisson's RPermitExpirableSemaphore runs them.
-- KEYS[1]  NAME   KEYS[2] "{NAME}:timeout"   KEYS[3] channel "redisson_sc:{NAME}"
-- ARGV[1]  what: 'available' | 'permits' | 'acquired' | 'set' | 'try_set' | 'add' | 'delete'
-- ARGV[2]  now (epoch ms)   ARGV[3] publish command   ARGV[4] p (set, try_set, add)
-- Reply (an integer): available: the available count (expired permits
-- reclaimed first, the new count published when > 0); permits: available +
-- acquired; acquired: the permits taken; set: 1 (the total becomes p:
-- available moves by p - total, may go negative; p published unless
-- unchanged; no reclaim, as Redisson); try_set: 1 if NAME was missing and
-- is now p (published), else 0; add: the new available count (SET, which
-- drops a TTL; p published when > 0); delete: 1 if NAME or the zset
-- existed, both now gone (Redisson's delete: no message); an error reply
-- for bad arguments.
local what = ARGV[1]
local now = tonumber(string.match(ARGV[2] or '', '^%d+$') and ARGV[2] or '')
if not now then return redis.error_reply('ERR rlock: invalid time (ms): ' .. tostring(ARGV[2])) end
local pubcmd = string.lower(ARGV[3] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[3]))
end
-- a user that may not publish on the channel (a Redis 7 ACL without it):
-- set, try_set and add are refused before anything is written; a reclaim
-- (the queries) writes without its message (waiters wake at the expiry
-- their try returned anyway)
local may_pub = not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[3], KEYS[3], '0')
if (what == 'set' or what == 'try_set' or what == 'add') and not may_pub then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[3] .. ' to the channel ' .. KEYS[3] ..
    ' (its ACL needs &' .. KEYS[3] .. ' or a channel pattern matching it)')
end
-- NAME must hold an integer (delete and try_set take any value)
if what ~= 'delete' and what ~= 'try_set' then
  local raw = redis.call('get', KEYS[1])
  if raw and not string.match(raw, '^%-?%d+$') then
    return redis.error_reply('ERR rlock: the semaphore does not hold an integer: ' .. raw)
  end
end
local p = nil
if what == 'set' or what == 'try_set' or what == 'add' then
  p = string.match(ARGV[4] or '', '^%-?%d+$') and #ARGV[4] <= 16 and tonumber(ARGV[4])
  if not p then return redis.error_reply('ERR rlock: invalid permit count: ' .. tostring(ARGV[4])) end
end

local function reclaim()
  local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
  if #expired > 0 then
    for i = 1, #expired, 1000 do
      redis.call('zrem', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
    end
    local value = redis.call('incrby', KEYS[1], #expired)
    if value > 0 and may_pub then redis.call(ARGV[3], KEYS[3], value) end
  end
end

if what == 'available' then
  reclaim()
  return tonumber(redis.call('get', KEYS[1]) or '0')
elseif what == 'permits' then
  reclaim()
  local v = redis.call('get', KEYS[1])
  if not v then return 0 end
  return tonumber(v) + redis.call('zcount', KEYS[2], '-inf', '+inf')
elseif what == 'acquired' then
  reclaim()
  return redis.call('zcount', KEYS[2], '-inf', '+inf')
elseif what == 'set' then
  local v = redis.call('get', KEYS[1])
  if not v then
    redis.call('set', KEYS[1], p)
    redis.call(ARGV[3], KEYS[3], p)
    return 1
  end
  local max = tonumber(v) + redis.call('zcount', KEYS[2], '-inf', '+inf')
  if max ~= p then
    redis.call('incrby', KEYS[1], p - max)
    redis.call(ARGV[3], KEYS[3], p)
  end
  return 1
elseif what == 'try_set' then
  if redis.call('exists', KEYS[1]) == 1 then return 0 end
  redis.call('set', KEYS[1], p)
  redis.call(ARGV[3], KEYS[3], p)
  return 1
elseif what == 'delete' then
  return redis.call('del', KEYS[1], KEYS[2]) > 0 and 1 or 0
elseif what == 'add' then
  local v = tonumber(redis.call('get', KEYS[1]) or '0') + p
  redis.call('set', KEYS[1], v)
  if p > 0 then redis.call(ARGV[3], KEYS[3], p) end
  return v
end
return redis.error_reply('ERR rlock: unknown call: ' .. tostring(what))
