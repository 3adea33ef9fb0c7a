-- pes_acquire_undo.lua -- give back the permit an acquire may have taken when
-- the client never saw its reply (timed out, connection lost) or no longer
-- wants it (cancelled), and stop a late copy of it from ever applying.
-- KEYS[1]  NAME   KEYS[2] "{NAME}:timeout"   KEYS[3] channel "redisson_sc:{NAME}"
-- KEYS[4]  the acquire latch of that request
-- ARGV[1]  permit id (32 lowercase hex)   ARGV[2] publish command
-- ARGV[3]  latch TTL (ms)
-- ARGV[4]  the holds the client counts for this permit id (0 or 1); -1:
--          trust the latch only
-- Reply: 1 the acquire had been applied: the permit given back (INCRBY 1,
--        the new count published, as Redisson's release does);
--        0 it had not: a tombstone now stops it from ever applying;
--        2 already undone (a re-send of this undo);
--        an error reply (nothing written) when an argument is invalid.
local ttl = ARGV[3]
if not (string.match(ttl, '^[1-9]%d*$') and #ttl <= 15) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
local keep = ARGV[4] or '-1'
if not (keep == '-1' or (string.match(keep, '^%d+$') and #keep <= 15)) then
  return redis.error_reply('ERR rlock: invalid hold count: ' .. keep)
end
keep = tonumber(keep)
if not (#ARGV[1] == 32 and string.match(ARGV[1], '^[0-9a-f]+$')) then
  return redis.error_reply('ERR rlock: invalid permit id: ' .. ARGV[1])
end
local pubcmd = string.lower(ARGV[2] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[2]))
end
local id = string.gsub(ARGV[1], '..', function(h) return string.char(tonumber(h, 16)) end)

-- the permit back into the count, if the zset holds it; true if it did
local function give_back()
  if redis.call('zrem', KEYS[2], id) == 0 then return false end
  local value = redis.call('incrby', KEYS[1], 1)
  -- the message only if this user may publish there (a Redis 7 ACL without
  -- the channel): the permit must come back all the same
  if not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[2], KEYS[3], '0') then
    redis.call(ARGV[2], KEYS[3], value)
  end
  return true
end

local latch = redis.call('get', KEYS[4])
if latch == 'undone' or latch == 'x' then
  return 2
end
if latch == '1' then
  redis.call('set', KEYS[4], 'undone', 'px', ttl)
  give_back()
  return 1 -- (if the permit is gone already, it expired and was reclaimed)
end

redis.call('set', KEYS[4], 'x', 'px', ttl)
-- no latch: never applied, or applied and its latch expired; the client
-- counts no hold of this id, so a permit of this id is that request's
if keep == 0 and give_back() then
  return 1
end
return 0
