-- rw_acquire_undo.lua -- give back the hold of a read or write acquire whose
-- reply the client never saw or no longer wants (rlock only; see
-- reentrant_acquire_undo.lua for when it is sent).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_rwlock:{NAME}"
-- KEYS[3]  the acquire latch of that request
-- ARGV[1]  unused (the message follows from ARGV[6])   ARGV[2] owner's field
--          ('<uuid>:<tid>' read, '<uuid>:<tid>:write' write)
-- ARGV[3]  publish command   ARGV[4] latch TTL (ms)
-- ARGV[5]  the hold count the client knows the owner has without this
--          request; -1: trust the latch only
-- ARGV[6]  'read' or 'write'
-- Reply: 1 a hold given back (or the try had been applied and its hold is
-- gone already); 0 a tombstone now stops the try; 2 already undone; an error
-- reply (nothing written) for a bad argument.
-- A read hold given back takes its timeout key with it (the highest); when
-- no holder is left NAME is deleted and '0' published; a write hold given
-- back to 0 deletes NAME (publish '1'), or with read holds left switches the
-- mode to read (publish '1'), as rw_write_unlock.lua. Read holds given back
-- in read mode set NAME's TTL to the longest live read hold's (published
-- when shorter), or delete NAME (publish '0') when no live one is left.

local ttl = ARGV[4]
if not (string.match(ttl, '^[1-9]%d*$') and #ttl <= 15) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
local keep = ARGV[5] or '-1'
if not (keep == '-1' or (string.match(keep, '^%d+$') and #keep <= 15)) then
  return redis.error_reply('ERR rlock: invalid hold count: ' .. keep)
end
keep = tonumber(keep)
if ARGV[2] == '' then return redis.error_reply('ERR rlock: empty owner id') end
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[3])
end
local read = ARGV[6] == 'read'
if not read and ARGV[6] ~= 'write' then
  return redis.error_reply('ERR rlock: invalid read-write mode: ' .. tostring(ARGV[6]))
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[2], '1') then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[3] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end
-- Redisson's suffixName: "{NAME}", or NAME when it holds '{'
local prefix = string.find(KEYS[1], '{', 1, true) and KEYS[1] or ('{' .. KEYS[1] .. '}')

local function held()
  return tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0') or 0
end

-- in read mode, after read holds were given back: NAME's TTL becomes the
-- longest live read hold's (as rw_read_unlock.lua makes it; a shorter TTL is
-- published so parked waiters wait for it), or NAME goes when none is alive
local function retime()
  if redis.call('hget', KEYS[1], 'mode') ~= 'read' then return end
  local max_remain = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local c = tonumber(redis.call('hget', KEYS[1], field))
    if c then
      for i = c, 1, -1 do
        max_remain = math.max(max_remain, redis.call('pttl', prefix .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if max_remain == 0 then max_remain = 1 end -- (rlock) PTTL 0: a hold alive to the end of this ms, not gone
  if max_remain <= 0 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], KEYS[2], '0')
    return
  end
  local cur = redis.call('pttl', KEYS[1])
  if cur < 0 or max_remain < cur then
    redis.call('pexpire', KEYS[1], max_remain)
    redis.call(ARGV[3], KEYS[2], '0')
  end
end

-- down from h to n holds of the owner
local function keep_only(h, n)
  if read then
    for i = h, n + 1, -1 do
      redis.call('del', prefix .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. i)
    end
  end
  if n > 0 then
    redis.call('hset', KEYS[1], ARGV[2], n)
    if read then retime() end
    return
  end
  redis.call('hdel', KEYS[1], ARGV[2])
  if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], KEYS[2], read and '0' or '1')
  elseif not read and redis.call('hget', KEYS[1], 'mode') == 'write' then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call(ARGV[3], KEYS[2], '1')
    retime() -- the read holds' TTL, as rw_write_unlock.lua's downgrade
  elseif read then
    retime()
  end
end

local latch = redis.call('get', KEYS[3])
if latch == 'undone' or latch == 'x' then
  return 2
end
if latch == '1' then
  redis.call('set', KEYS[3], 'undone', 'px', ttl)
  local h = held()
  if h > 0 then keep_only(h, h - 1) end
  return 1
end

redis.call('set', KEYS[3], 'x', 'px', ttl)
local h = held()
if keep >= 0 and h > keep then
  keep_only(h, keep)
  return 1
end
return 0
