-- reentrant_unlock.lua -- release one hold of a reentrant lock (Redisson RLock unlock).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_lock__channel:{NAME}"
-- KEYS[3]  unlock latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  message ('0')   ARGV[2] TTL (ms) to keep while still held
-- ARGV[3]  owner id   ARGV[4] publish command (publish / spublish)   ARGV[5] latch TTL (ms)
-- ARGV[6]  (optional) the hold count the client expects to be left; -1: no check
-- ARGV[7]  (optional) how many more holds the server may count (releases whose
--          outcome the client never saw, which it counts as done)
-- Reply: 1 released (key deleted, message published, nobody subscribed);
--        2 released and the message reached subscribers (waiters exist: the client
--          then lets them go first, see docs/architecture.md "handoff");
--        0 still held (count > 0); nil this owner does not hold it;
--       -1 the count left disagreed with the client's: the owner's field was
--          removed (a loss; waiters woken if the lock is free now);
--        an error reply (nothing written) when an argument is invalid.
-- A re-sent request gets its first answer (the latch).

-- a duration in ms: decimal digits, 1 to 15 of them, no leading zero
local function ms(s)
  if string.match(s, '^[1-9]%d*$') and #s <= 15 then return tonumber(s) end
end
-- a count: decimal digits, or -1
local function count(s, default)
  if s == nil then return default end
  if s == '-1' or (string.match(s, '^%d+$') and #s <= 15) then return tonumber(s) end
end
local want, extra = count(ARGV[6], -1), count(ARGV[7], 0)
if not ms(ARGV[2]) then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. ARGV[2]) end
if not ms(ARGV[5]) then return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ARGV[5]) end
if ARGV[3] == '' then return redis.error_reply('ERR rlock: empty owner id') end
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[4])
end
if not want or not extra or extra < 0 then return redis.error_reply('ERR rlock: invalid expected count') end

local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end

local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if want >= 0 and (left < want or left > want + extra) then
  -- not the holds the client took: drop them all, free the lock if nobody else holds it
  redis.call('hdel', KEYS[1], ARGV[3])
  if redis.call('exists', KEYS[1]) == 0 then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
  end
  redis.call('set', KEYS[3], -1, 'px', ARGV[5])
  return -1
end
if want >= 0 and left > want then
  -- the releases whose outcome the client never saw did not land: they count now
  left = want
  if left > 0 then redis.call('hset', KEYS[1], ARGV[3], left) end
end
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
local released = 1
if redis.call(ARGV[4], KEYS[2], ARGV[1]) > 0 then
  released = 2
end
redis.call('set', KEYS[3], released, 'px', ARGV[5])
return released
