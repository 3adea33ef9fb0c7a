-- simple_acquire.lua -- take a simple lock: SET NAME <token> NX PX <lease>, the
-- layout of redis-py's Lock, node-redlock and redsync (one string key, the
-- holder's token its value, its TTL the lease).
-- KEYS[1]  NAME: a string, the holder's token (rlock: the owner id)
-- KEYS[2]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] token (owner id)   ARGV[3] latch TTL (ms)
-- Reply: nil when acquired; otherwise the lock's PTTL (held by another token:
-- -1 when it has no TTL); -3 when simple_acquire_undo.lua cancelled this
-- request; -4 when this token holds it already (the simple lock is not
-- reentrant: a second acquire by the holder is refused, never waited for);
-- an error reply (nothing written) when an argument is invalid.
-- The latch makes a re-sent request (after a timeout) count only once.

-- a duration in ms: decimal digits, 1 to 15 of them, no leading zero
local function ms(s)
  if string.match(s, '^[1-9]%d*$') and #s <= 15 then return tonumber(s) end
end
if not ms(ARGV[1]) then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. ARGV[1]) end
if not ms(ARGV[3]) then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ARGV[3]) end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty token') end

local latch = redis.call('get', KEYS[2])
if latch == '1' then
  return nil -- a re-send of a request that was already applied
elseif latch then
  return -3 -- undone by the client: never apply it
end

if redis.call('set', KEYS[1], ARGV[2], 'nx', 'px', ARGV[1]) then
  redis.call('set', KEYS[2], '1', 'px', ARGV[3])
  return nil
end
if redis.call('type', KEYS[1]).ok == 'string' and redis.call('get', KEYS[1]) == ARGV[2] then
  return -4
end
return redis.call('pttl', KEYS[1])
