-- pes_acquire.lua -- take one permit of a permit-expirable semaphore, stored
-- as Redisson's RPermitExpirableSemaphore stores it: NAME a string, the
-- available count; "{NAME}:timeout" a zset, member the permit id (16 raw
-- bytes), score its expiry (epoch ms; 922337203685477: no expiry).
-- KEYS[1]  NAME   KEYS[2] "{NAME}:timeout"   KEYS[3] channel "redisson_sc:{NAME}"
-- KEYS[4]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] permit id (32 lowercase hex)   ARGV[3] latch TTL (ms)
-- ARGV[4]  now (client wall clock, epoch ms)   ARGV[5] publish command
-- Reply: nil when the permit is held (taken now, or by an earlier copy of
-- this request or another request with the same permit id: a permit id is
-- counted once); otherwise how long (ms) until the nearest permit expires,
-- -1 when none will (wait for a release message); -3 when
-- pes_acquire_undo.lua cancelled this request; an error reply (nothing
-- written) when an argument is invalid.
-- Steps as Redisson's tryAcquire(1, timeoutDate): expired permits reclaimed
-- (at most one), the count published when > 0; DECRBY 1 and ZADD; the
-- zset gets NAME's TTL when NAME has one.
local function ms(s)
  if string.match(s, '^[1-9]%d*$') and #s <= 15 then return tonumber(s) end
end
local lease = ms(ARGV[1])
if not lease then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. ARGV[1]) end
if not ms(ARGV[3]) then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ARGV[3]) end
local now = ms(ARGV[4])
if not now then return redis.error_reply('ERR rlock: invalid time (ms): ' .. ARGV[4]) end
if not (#ARGV[2] == 32 and string.match(ARGV[2], '^[0-9a-f]+$')) then
  return redis.error_reply('ERR rlock: invalid permit id: ' .. ARGV[2])
end
local pubcmd = string.lower(ARGV[5] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[5]))
end
local id = string.gsub(ARGV[2], '..', function(h) return string.char(tonumber(h, 16)) end)

local latch = redis.call('get', KEYS[4])
if latch == '1' then
  return nil -- a re-send of a request that was already applied
elseif latch then
  return -3 -- undone by the client: never apply it
end
-- a permit id is counted once: another copy took it already
if redis.call('zscore', KEYS[2], id) then
  redis.call('set', KEYS[4], '1', 'px', ARGV[3])
  return nil
end

-- NAME must hold an integer (Redisson's script fails on anything else):
-- another string would read as "no permit" and the caller would wait for ever
local raw = redis.call('get', KEYS[1])
if raw and not string.match(raw, '^%-?%d+$') then
  return redis.error_reply('ERR rlock: the semaphore does not hold an integer: ' .. raw)
end

-- reclaim expired permits (at most the one asked for)
local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 1)
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  -- its message only if this user may publish there (a Redis 7 ACL without
  -- the channel): waiters wake at the expiry their try returned anyway
  if value > 0 and (not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[5], KEYS[3], '0')) then
    redis.call(ARGV[5], KEYS[3], value)
  end
end

local value = tonumber(redis.call('get', KEYS[1]))
if value and value >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], now + lease, id)
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
  redis.call('set', KEYS[4], '1', 'px', ARGV[3])
  return nil
end

local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] and first[2] ~= '922337203685477' then
  local wait = tonumber(first[2]) - now
  return wait > 0 and wait or 1
end
return -1
