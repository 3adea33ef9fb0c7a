-- rw_query.lua -- the queries of a read-write lock's handles.
-- KEYS[1]  NAME   ARGV[1] 'locked' | 'held' | 'count' | 'holders'
-- ARGV[2]  the owner's field ('<uuid>:<tid>' read, '<uuid>:<tid>:write' write)
-- ARGV[3]  'read' or 'write' (the handle's)
-- Reply: locked: 1/0, Redisson's isLocked (read: mode read, or mode write with
-- a read hold beside the write hold (#4400); write: mode write); held: 1/0
-- (HEXISTS); count: the hold count or nil (HGET); holders: field, count pairs
-- of every holder, read and write ('mode' left out).
local what = ARGV[1]
if what == 'held' then return redis.call('hexists', KEYS[1], ARGV[2]) end
if what == 'count' then return redis.call('hget', KEYS[1], ARGV[2]) end
if what == 'locked' then
  local mode = redis.call('hget', KEYS[1], 'mode')
  if ARGV[3] == 'write' then return mode == 'write' and 1 or 0 end
  if mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then return 1 end
  return 0
end
if what == 'holders' then
  local all = redis.call('hgetall', KEYS[1])
  local out = {}
  for i = 1, #all, 2 do
    if all[i] ~= 'mode' then
      out[#out + 1] = all[i]
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end
return redis.error_reply('ERR rlock: invalid query: ' .. tostring(what))
