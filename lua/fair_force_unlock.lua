-- fair_force_unlock.lua -- delete a fair lock whoever holds it, and wake the queue's head.
-- KEYS[1]  NAME   KEYS[2] queue   KEYS[3] deadlines (zset)
-- KEYS[4]  channel prefix "redisson_lock__channel:{NAME}"
-- ARGV[1]  message ('0')   ARGV[2] publish command
-- ARGV[3]  '1': delete NAME whatever it holds; '0': only if it is a lock
-- ARGV[4]  now (epoch ms)
-- Reply: 1 it was a lock: deleted, the head told on its channel; 0 no such
--        key; 2 (ARGV[3] '1') it was not a lock: deleted anyway; error
--        "NOTLOCK <type>" (ARGV[3] '0'): left as it is; an error reply
--        (nothing written) for a bad argument.
-- Redisson's forceUnlock: stale heads evicted, DEL, publish '0' to the head's
-- channel. The queue stays (its waiters keep their places). rlock refuses a
-- key that is not a lock, as reentrant_force_unlock.lua does, and says a
-- deleted lock free on KEYS[4] itself (for free-waiters).
local OWNER = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x:'
local function is_lock(key, kind)
  if kind ~= 'hash' or redis.call('hlen', key) > 64 then return false end
  local fields = redis.call('hgetall', key)
  for i = 1, #fields, 2 do
    if not string.match(fields[i], OWNER) or not string.match(fields[i + 1], '^[1-9]%d*$') then
      return false
    end
  end
  return true
end

if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[2])
end
local any_type = ARGV[3] or '0'
if any_type ~= '0' and any_type ~= '1' then
  return redis.error_reply('ERR rlock: invalid any-type flag: ' .. any_type)
end
local now_s = ARGV[4] or ''
if not (#now_s <= 15 and string.find(now_s, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid time (epoch ms): ' .. now_s)
end
local now = tonumber(now_s)

-- ACL (Redis 7): the waiter channels this script may publish to are checked
-- before its first write; a user that may not publish to one of them gets
-- NOPERM and nothing is written (redis.acl_check_cmd: Redis 7.0 on; without
-- it nothing is checked). Each channel is checked as it is: an ACL channel
-- pattern may allow one waiter's channel and not another's.
local function refused(cmd, waiters, msg)
  if not redis.acl_check_cmd then return nil end
  for _, w in ipairs(waiters) do
    local ch = KEYS[4] .. ':' .. w
    if not redis.acl_check_cmd(cmd, ch, msg) then
      return redis.error_reply('NOPERM rlock: this user may not ' .. cmd .. ' to the channel ' .. ch ..
        ' (its ACL needs &' .. ch .. ' or a channel pattern matching it)')
    end
  end
end
-- the queue as the stale-head eviction below will leave it, found by reads
-- only: the list and the index of its head then (skip: never evicted)
local function live_queue(now, skip)
  local q, i, gone = redis.call('lrange', KEYS[2], 0, -1), 1, {}
  while q[i] and q[i] ~= skip do
    local t = not gone[q[i]] and redis.call('zscore', KEYS[3], q[i])
    if t and tonumber(t) > now then break end -- (rlock's addition: a head without a deadline is stale, fair_acquire.lua)
    gone[q[i]] = true
    i = i + 1
  end
  return q, i
end

local kind = redis.call('type', KEYS[1]).ok
local lock = kind ~= 'none' and is_lock(KEYS[1], kind)
if kind ~= 'none' and not lock and any_type ~= '1' then
  return redis.error_reply('NOTLOCK ' .. kind)
end
-- a lock deleted tells the head after the eviction: the only channel
if kind ~= 'none' then
  local q, i = live_queue(now)
  local e = q[i] and refused(ARGV[2], {q[i]}, ARGV[1])
  if e then return e end
end
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then break end
  local t = redis.call('zscore', KEYS[3], head)
  if t and tonumber(t) > now then break end
  if t then redis.call('zrem', KEYS[3], head) end
  redis.call('lpop', KEYS[2])
end
-- rlock's addition: a lock that goes free says so on its own channel too,
-- where free-waiters listen (rlock_lock_await_free, rlock wait); Redisson's
-- fair waiters listen on their own channels only. Only where this user may
-- publish: without it a free-waiter wakes at the TTL.
local function say_free(cmd, msg)
  if not redis.acl_check_cmd then -- (before 7.0: no check; a refusal must not fail the script after its writes)
    redis.pcall(cmd, KEYS[4], msg)
  elseif redis.acl_check_cmd(cmd, KEYS[4], msg) then
    redis.call(cmd, KEYS[4], msg)
  end
end
if kind == 'none' then return 0 end
redis.call('del', KEYS[1])
say_free(ARGV[2], ARGV[1])
local head = redis.call('lindex', KEYS[2], 0)
if head then redis.call(ARGV[2], KEYS[4] .. ':' .. head, ARGV[1]) end
if lock then return 1 end
return 2
