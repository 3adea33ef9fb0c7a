-- lock_unlock.lua -- release one hold of a reentrant lock (Redisson RLock unlock).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_lock__channel:{NAME}"
-- KEYS[3]  unlock latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  message ('0')   ARGV[2] lease (ms) kept while still held
-- ARGV[3]  owner id   ARGV[4] publish command (publish / spublish)   ARGV[5] latch TTL (ms)
-- Reply: 1 released (key deleted, message published, nobody subscribed);
--        2 released and the message reached subscribers (waiters exist: the client
--          then lets them go first, see docs/architecture.md "handoff");
--        0 still held (count > 0); nil this owner does not hold it.
-- A re-sent request gets its first answer (the latch).
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end

local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
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
