-- reentrant_acquire.lua -- take or re-enter a reentrant lock (Redisson RLock format).
-- KEYS[1]  NAME: a hash, owner id -> hold count; the key's TTL is the lease
-- KEYS[2]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] owner id   ARGV[3] latch TTL (ms)
-- Reply: nil when acquired; otherwise the lock's PTTL (held by another owner:
-- wait at most that long); -3 when reentrant_acquire_undo.lua cancelled this
-- request; an error reply (nothing written) when an argument is invalid.
-- The latch makes a re-sent request (after a timeout) count only once; it is
-- written only when the request takes a hold (a refused try leaves nothing).
-- A re-entry never shortens the lease: the TTL only grows to ARGV[1].
-- The common path (a free lock) costs one call more than Redisson's: the SET NX
-- of the latch, which is also the check that this request was not seen before.

local lease, ttl = ARGV[1], ARGV[3]
-- the lease in ms: 1 to 15 decimal digits, no leading zero (the latch TTL is
-- checked by the SET of the latch, the first write on every path that writes)
if #lease > 15 or not string.find(lease, '^[1-9]%d*$') then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end

if redis.call('exists', KEYS[1]) == 0 then
  -- free: take it, unless this request was applied already (a re-send) or undone
  local new = redis.pcall('set', KEYS[2], '1', 'px', ttl, 'nx')
  if not new then
    if redis.call('get', KEYS[2]) == '1' then return nil end
    return -3
  elseif new.err then
    -- SET's own ERR is a bad TTL; a refusal of the server (READONLY: a demoted
    -- master, OOM...) goes back as it is (the client acts on READONLY)
    if string.sub(new.err, 1, 4) ~= 'ERR ' then return new end
    return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
  end
  redis.call('hincrby', KEYS[1], ARGV[2], '1')
  redis.call('pexpire', KEYS[1], lease)
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return redis.call('pttl', KEYS[1]) -- another owner's
end
-- ours: a re-entry, or a re-send of a request that was applied
local latch = redis.call('get', KEYS[2])
if latch == '1' then
  return nil
elseif latch then
  return -3 -- undone by the client: never apply it
end
local set = redis.pcall('set', KEYS[2], '1', 'px', ttl)
if set.err then
  if string.sub(set.err, 1, 4) ~= 'ERR ' then return set end -- a refusal (READONLY, OOM...)
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
redis.call('hincrby', KEYS[1], ARGV[2], '1')
if redis.call('pttl', KEYS[1]) < tonumber(lease) then
  redis.call('pexpire', KEYS[1], lease)
end
return nil
