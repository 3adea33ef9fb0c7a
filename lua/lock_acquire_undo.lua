-- lock_acquire_undo.lua -- give back the hold of an acquire whose reply the
-- client never saw (timed out, connection lost) or no longer wants (cancelled).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_lock__channel:{NAME}"
-- KEYS[3]  the acquire latch of that request
-- ARGV[1]  unlock message ('0')   ARGV[2] owner id   ARGV[3] publish command
-- ARGV[4]  latch TTL (ms)
-- Reply: 1 the acquire had been applied: one hold given back;
--        0 it had not: a tombstone now stops it from ever applying;
--        2 already undone (a re-send of this undo).
local latch = redis.call('get', KEYS[3])
if latch == 'undone' or latch == 'x' then
  return 2
end
if latch ~= '1' then
  redis.call('set', KEYS[3], 'x', 'px', ARGV[4])
  return 0
end

redis.call('set', KEYS[3], 'undone', 'px', ARGV[4])
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return 1 -- the hold is gone already (lease ran out)
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) <= 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[1])
end
return 1
