-- reentrant_force_unlock.lua -- delete a lock whoever holds it, and wake a waiter.
-- KEYS[1]  NAME   KEYS[2] channel "redisson_lock__channel:{NAME}"
-- ARGV[1]  message ('0')   ARGV[2] publish command
-- Reply: 1 if it was locked, else 0.
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
