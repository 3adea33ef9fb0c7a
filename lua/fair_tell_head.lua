-- fair_tell_head.lua -- the MultiLock's final step cut a fair lock's TTL (the
-- watchdog lease of a member taken while later ones were awaited, to the
-- MultiLock's lease): the queue's head, which listens on a channel of its own
-- and parked on the old TTL, tries again now, as after an unlock (Redisson's
-- fair unlock tells the head only), so it waits for the new TTL instead.
-- KEYS[1]  the queue "redisson_lock_queue:{NAME}"
-- KEYS[2]  channel prefix "redisson_lock__channel:{NAME}"
-- ARGV[1]  publish command ('publish' or 'spublish')
-- Reply: 1 a head was told, 0 nobody queued; an error reply for a bad
-- publish command. A channel the user may not publish to is left untold.
if ARGV[1] ~= 'publish' and ARGV[1] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[1]))
end
local head = redis.call('lindex', KEYS[1], 0)
if not head then return 0 end
redis.pcall(ARGV[1], KEYS[2] .. ':' .. head, '0')
return 1
