-- fenced_acquire.lua -- take or re-enter a fenced lock (Redisson's RFencedLock:
-- RLock's hash plus a token counter), and issue its token in the same script.
-- KEYS[1]  NAME: a hash, owner id -> hold count; its TTL the lease
-- KEYS[2]  token "redisson_lock_token:{NAME}": a string counter, never
--          expired or deleted by the lock (INCR on every acquisition,
--          re-entries included)
-- KEYS[3]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] owner id   ARGV[3] latch TTL (ms)
-- Reply: {-1, token} when acquired (Redisson's shape); the lock's PTTL (an
-- integer, never an array: -1 when the hash has no TTL) when another owner
-- holds it (or NAME is another type); -3 when the undo
-- (reentrant_acquire_undo.lua) cancelled this request; an error reply
-- (nothing written) when an argument is invalid, or the INCR's own error (a
-- token key that is not a counter).
-- Redisson's steps (KEYS name, tokenKey; ARGV lease, owner): hash missing or
-- my field exists: INCR tokenKey, HINCRBY field 1, PEXPIRE lease, {-1, token};
-- else {PTTL, -1}. rlock's reply for busy is the bare PTTL, so a hash without
-- TTL (PTTL -1) can never read as a grant. The latch (rlock's) makes a
-- re-sent request count once: the latch holds '1:<token>', and a re-send of
-- an applied try answers {-1, that token} without a second INCR (never the
-- counter now: another owner's grant may have moved it since). As for the reentrant lock, a re-entry
-- never shortens the TTL.

local function ms(s)
  return #s <= 15 and string.find(s, '^[1-9]%d*$')
end
if not ms(ARGV[1]) then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. ARGV[1]) end
if not ms(ARGV[3] or '') then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. tostring(ARGV[3]))
end
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end

local seen = redis.call('get', KEYS[3])
if seen and string.sub(seen, 1, 2) == '1:' then
  return {-1, tonumber(string.sub(seen, 3))} -- a re-send of an applied try: its own token
elseif seen then
  return -3 -- undone by the client: never apply it
end

local held_for = redis.call('pttl', KEYS[1])
if held_for ~= -2 and not (redis.call('type', KEYS[1]).ok == 'hash'
    and redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  return held_for -- another owner's
end
local token = redis.call('incr', KEYS[2]) -- first: its error (not a counter) writes nothing
redis.call('set', KEYS[3], '1:' .. token, 'px', ARGV[3]) -- '1:' the undo's 'applied'
redis.call('hincrby', KEYS[1], ARGV[2], '1')
if held_for == -2 or held_for < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return {-1, token}
