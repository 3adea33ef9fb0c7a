-- nonreentrant_acquire.lua -- take a non-reentrant lock (Redisson 4.4's
-- getNonReentrantLock: RLock's layout, the holder's second acquire refused).
-- KEYS[1]  NAME: a hash, owner id -> hold count (always 1 here); its TTL the lease
-- KEYS[2]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] owner id   ARGV[3] latch TTL (ms)
-- Reply: nil when acquired; otherwise the lock's PTTL (held by another owner:
-- wait at most that long; -1: no TTL); -3 when the undo
-- (reentrant_acquire_undo.lua) cancelled this request; -4 when this owner
-- holds it already (Redisson replies the error NON_REENTRANT_REACQUIRE there:
-- the state is the same, nothing written, the count stays 1); an error reply
-- (nothing written) when an argument is invalid.
-- Redisson's steps (KEYS[1] name; ARGV lease, owner): key missing: HINCRBY 1,
-- PEXPIRE, nil; my field exists: refused; else PTTL. The latch (rlock's)
-- makes a re-sent request (after a timeout) count only once: a re-send of a
-- request that was applied answers nil, never -4.

local function ms(s)
  return #s <= 15 and string.find(s, '^[1-9]%d*$')
end
if not ms(ARGV[1]) then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. ARGV[1]) end
if not ms(ARGV[3] or '') then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[3]))
end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end

local seen = redis.call('get', KEYS[2])
if seen == '1' then
  return nil -- a re-send of a request that was applied
elseif seen then
  return -3 -- undone by the client: never apply it
end

local held_for = redis.call('pttl', KEYS[1])
if held_for ~= -2 then
  if redis.call('type', KEYS[1]).ok == 'hash' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return -4
  end
  return held_for -- another owner's (or another kind's key: busy)
end
redis.call('set', KEYS[2], '1', 'px', ARGV[3])
redis.call('hincrby', KEYS[1], ARGV[2], '1')
redis.call('pexpire', KEYS[1], ARGV[1])
return nil
