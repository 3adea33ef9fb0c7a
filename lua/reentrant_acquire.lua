-- reentrant_acquire.lua -- take or re-enter a reentrant lock (Redisson RLock format).
-- KEYS[1]  NAME: a hash, owner id -> hold count; the key's TTL is the lease
-- KEYS[2]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] owner id
-- ARGV[3]  latch TTL (ms); absent: this copy writes no latch (the fast path's
--          first copy, whose answer the client reads at once): a latch that
--          exists then was planted by a later request of this id (its undo),
--          so this copy is late and changes nothing (-3)
-- Reply: nil when acquired; otherwise the lock's PTTL (held by another owner:
-- wait at most that long); -3 when reentrant_acquire_undo.lua cancelled this
-- request; an error reply (nothing written) when an argument is invalid (the
-- latch TTL: on the paths that write), or the server's refusal of the first
-- write (READONLY, OOM) as it is.
-- The latch makes a re-sent request (after a timeout) count only once; it is
-- written only when the request takes a hold (a refused try leaves nothing).
-- A re-entry never shortens the lease: the TTL only grows to ARGV[1].
-- A free lock costs Redisson's three calls on the fast path's first copy (one
-- EXISTS of the lock and the latch, HINCRBY, PEXPIRE); a latched request pays
-- the latch's SET NX, which is also the check that it was not seen before.

local lease, ttl = ARGV[1], ARGV[3]
-- the lease in ms: 1 to 15 decimal digits, no leading zero (the latch TTL is
-- checked by the SET of the latch, the first write on every path that writes)
if #lease > 15 or not string.find(lease, '^[1-9]%d*$') then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end
-- a re-entry adds one to the owner's count: it must be a count HINCRBY can
-- raise (decimal digits, no leading zero, below 2^63-1), checked before the
-- first write
local function bad_count(n)
  return n and not (string.find(n, '^[1-9]%d*$') and (#n < 19 or #n == 19 and n < '9223372036854775807'))
    and redis.error_reply('ERR rlock: hold count cannot be raised (a whole number from 1 to 2^63-2 expected): ' .. n)
end

-- the fast path's first copy of a free lock (the common case): one call finds
-- the lock free and no latch, as Redisson's acquire finds the lock free
local held_for = -2 -- the lock's PTTL: -2 no such key, -1 no TTL
local found = not ttl and redis.call('exists', KEYS[1], KEYS[2]) -- how many of the two exist
if ttl or found > 0 then
  held_for = redis.call('pttl', KEYS[1])
  local mine = held_for ~= -2 and redis.call('hget', KEYS[1], ARGV[2])
  if held_for ~= -2 and not mine then
    return held_for -- another owner's
  end

  -- free, or ours (a re-entry): first the latch, the check that this request
  -- is new (not a re-send of one that was applied, not undone by the client)
  local latch
  if not ttl then -- written by nobody but this id's undo: found beside the lock
    if found > (held_for == -2 and 0 or 1) then return -3 end
    if bad_count(mine) then return bad_count(mine) end
  elseif mine then
    local seen = redis.call('get', KEYS[2])
    if seen == '1' then return nil elseif seen then return -3 end
    if bad_count(mine) then return bad_count(mine) end
    latch = redis.pcall('set', KEYS[2], '1', 'px', ttl)
  else
    latch = redis.pcall('set', KEYS[2], '1', 'px', ttl, 'nx')
    if not latch then
      if redis.call('get', KEYS[2]) == '1' then return nil end
      return -3
    end
  end
  if latch and latch.err then -- nothing written: a bad latch TTL, else the server's
    -- own error as it is (READONLY on a replica, OOM, ...)
    if #ttl > 15 or not string.find(ttl, '^[1-9]%d*$') then
      return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
    end
    return latch
  end
end

redis.call('hincrby', KEYS[1], ARGV[2], '1')
if held_for == -2 or held_for < tonumber(lease) then
  redis.call('pexpire', KEYS[1], lease)
end
return nil
