-- lock_renew.lua -- the watchdog's batched lease renewal: many holds per call.
-- KEYS[i]    the lock names
-- ARGV[1]    lease (ms)   ARGV[i + 1] the owner id holding KEYS[i]
-- Reply: an array, 1 where the owner still holds KEYS[i] (lease reset),
--        0 where the hold is gone (the client stops renewing it: lock lost).
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
