-- reentrant_renew.lua -- the watchdog's batched lease renewal: many holds per call.
-- KEYS[i]    the lock names
-- ARGV[1]    lease (ms), or '=' and the lease: the TTL becomes exactly that
--            (the MultiLock's one lease, set once every member is held; a
--            read-write lock's write hold: never below its owner's read holds),
--            or '?': only ask, no TTL is touched (the reconnect's check of
--            fixed-lease holds: a check the server runs late must not extend a
--            lease that is nearly over)
-- ARGV[i + 1] the owner id holding KEYS[i]
-- Reply: a string, one character per name (one reply object for the whole
--        batch, not one per name): '1' where the owner still holds KEYS[i] (its TTL is now at
--        least the lease: a longer TTL, from a longer fixed lease of the same
--        owner, is kept), '0' where the hold is gone (the client stops renewing
--        it: lock lost); an error reply (nothing written) for a bad lease.
local ask = ARGV[1] == '?'
local exact = string.sub(ARGV[1], 1, 1) == '='
local lease = exact and string.sub(ARGV[1], 2) or ARGV[1]
if not ask and not (string.match(lease, '^[1-9]%d*$') and #lease <= 15) then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
local lease_ms = tonumber(lease)
local out = {}
for i = 1, #KEYS do
  -- the type first: a name taken by another kind (a simple lock's string)
  -- is a hold gone, not an error failing the whole batch
  if redis.call('type', KEYS[i]).ok == 'hash' and redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    if ask then
      -- only asked: the TTL stays as it is
    elseif exact then
      -- (rlock) a read-write lock's write hold ('mode' write): its owner's
      -- read holds inside keep theirs (their timeout keys), as
      -- rw_write_unlock.lua keeps them; the exact lease never cuts them
      local keep = lease_ms
      if redis.call('hget', KEYS[i], 'mode') == 'write' then
        local prefix = string.find(KEYS[i], '{', 1, true) and KEYS[i] or ('{' .. KEYS[i] .. '}')
        for _, field in ipairs(redis.call('hkeys', KEYS[i])) do
          local c = field ~= ARGV[i + 1] and tonumber(redis.call('hget', KEYS[i], field))
          if c then
            for j = c, 1, -1 do
              keep = math.max(keep, redis.call('pttl', prefix .. ':' .. field .. ':rwlock_timeout:' .. j))
            end
          end
        end
      end
      redis.call('pexpire', KEYS[i], keep)
    elseif redis.call('pttl', KEYS[i]) < lease_ms then
      redis.call('pexpire', KEYS[i], lease)
    end
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
