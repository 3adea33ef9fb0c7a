-- rw_read_renew.lua -- the watchdog's batched renewal of read holds (Redisson's
-- ReadLockTask since 4.4.0: only this client's own holds).
-- KEYS[i]    the lock names
-- ARGV[1]    lease (ms), or '=' and the lease: set exactly (MultiLock), or '?':
--            only ask, no TTL is touched (the reconnect's check of fixed-lease
--            holds: a check the server runs late must not extend a lease)
-- ARGV[i + 1] the owner id '<uuid>:<tid>' holding read locks of KEYS[i]
-- Reply: a string, one character per name: '1' where at least one of the
-- owner's read holds is alive (its timeout keys "{NAME}:<owner>:rwlock_timeout:j",
-- j = count..1, and NAME get the lease; a longer TTL of NAME is kept unless
-- '=': then in read mode NAME's TTL becomes the longest of every read hold's,
-- never less than another reader's), '0' where none is (the hold is lost); an
-- error reply for a bad lease.
local ask = ARGV[1] == '?'
local exact = string.sub(ARGV[1], 1, 1) == '='
local lease = exact and string.sub(ARGV[1], 2) or ARGV[1]
if not ask and not (string.match(lease, '^[1-9]%d*$') and #lease <= 15) then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
local lease_ms = tonumber(lease) or 0
local out = {}
for i = 1, #KEYS do
  local alive = false
  if redis.call('type', KEYS[i]).ok == 'hash' then
    local n = tonumber(redis.call('hget', KEYS[i], ARGV[i + 1]) or '')
    if n then
      local prefix = string.find(KEYS[i], '{', 1, true) and KEYS[i] or ('{' .. KEYS[i] .. '}')
      for j = n, 1, -1 do
        local key = prefix .. ':' .. ARGV[i + 1] .. ':rwlock_timeout:' .. j
        if ask then
          if redis.call('exists', key) == 1 then alive = true end
        elseif redis.call('pexpire', key, lease) == 1 then
          alive = true
        end
      end
    end
    if alive and not ask and exact and redis.call('hget', KEYS[i], 'mode') == 'read' then
      -- (rlock) '=': NAME's TTL becomes the longest of the read holds' (this
      -- owner's now the lease, another reader's may be longer): set to the
      -- lease alone, NAME would end another reader's hold early and let a
      -- writer in beside it. In write mode NAME is only lengthened (the
      -- write lease stands)
      local keep = lease_ms
      local prefix = string.find(KEYS[i], '{', 1, true) and KEYS[i] or ('{' .. KEYS[i] .. '}')
      for _, field in ipairs(redis.call('hkeys', KEYS[i])) do
        local c = field ~= ARGV[i + 1] and tonumber(redis.call('hget', KEYS[i], field))
        if c then
          for j = c, 1, -1 do
            keep = math.max(keep, redis.call('pttl', prefix .. ':' .. field .. ':rwlock_timeout:' .. j))
          end
        end
      end
      redis.call('pexpire', KEYS[i], keep)
    elseif alive and not ask and redis.call('pttl', KEYS[i]) < lease_ms then
      redis.call('pexpire', KEYS[i], lease)
    end
  end
  out[i] = alive and '1' or '0'
end
return table.concat(out)
