-- reentrant_acquire.lua -- take or re-enter a reentrant lock (Redisson RLock format).
-- KEYS[1]  NAME: a hash, owner id -> hold count; the key's TTL is the lease
-- KEYS[2]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] owner id   ARGV[3] latch TTL (ms)
-- Reply: nil when acquired; otherwise the lock's PTTL (held by another owner:
-- wait at most that long); -3 when reentrant_acquire_undo.lua cancelled this request;
-- an error reply (nothing written) when an argument is invalid.
-- The latch makes a re-sent request (after a timeout) count only once.
-- A re-entry never shortens the lease: the TTL only grows to ARGV[1].

-- a duration in ms: decimal digits, 1 to 15 of them, no leading zero
local function ms(s)
  if string.match(s, '^[1-9]%d*$') and #s <= 15 then return tonumber(s) end
end
local lease = ms(ARGV[1])
if not lease then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. ARGV[1]) end
if not ms(ARGV[3]) then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ARGV[3]) end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end

local latch = redis.call('get', KEYS[2])
if latch == '1' then
  return nil -- a re-send of a request that was already applied
elseif latch then
  return -3 -- undone by the client: never apply it
end

if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
else
  return redis.call('pttl', KEYS[1])
end
redis.call('set', KEYS[2], '1', 'px', ARGV[3])
return nil
