-- fair_acquire_undo.lua -- give back what a fair-lock try may have taken (a hold
-- and its place in the queue) when the client will not use it: the caller
-- gave up (wait over, cancelled), the try's answer was lost, the client closes.
-- KEYS[1]  NAME   KEYS[2] queue   KEYS[3] deadlines (zset)
-- KEYS[4]  channel prefix "redisson_lock__channel:{NAME}" (a waiter's channel: KEYS[4] .. ':' .. owner)
-- KEYS[5]  the acquire latch of that try
-- ARGV[1]  message ('0')   ARGV[2] owner id   ARGV[3] publish command
-- ARGV[4]  latch TTL (ms)
-- ARGV[5]  the hold count the client knows the owner has (without this try);
--          -1: trust the latch only
-- ARGV[6]  the owner's slot (ms) as its tries sent it
-- ARGV[7]  '1': the owner goes on waiting (keep its queue entry: only the
--          tombstone); '0': it leaves the queue
-- KEYS[6]  optional: rlock's handoff registry "rlock_acquire_latch:{NAME}:handoff":
--          an owner that leaves the queue leaves it too. A try the unlock
--          granted directly (fair_unlock.lua) has its latch '1': given back
--          here like any applied try.
-- Reply: 1 the try had been applied: one hold given back (or a count above
--        ARGV[5] brought down); 0 nothing to give back; 2 already undone (a
--        late copy of this undo: nothing written); an error reply (nothing
--        written) for a bad argument.
-- Leaving the queue is Redisson's acquireFailed: every waiter behind the
-- owner moves down by its slot, then ZREM and LREM. rlock's additions: the
-- latch (a tombstone, so a late copy of the try never applies or queues: 'x'
-- while the owner stays queued, 'xd' once it left, 'undone' for a hold given
-- back); the next head is told on its channel when the lock is free, and
-- every waiter behind the owner when it leaves (their deadlines moved down):
-- those this user may publish to. A waiter behind whose channel the ACL
-- refuses keeps its deadline, untold (a later deadline only keeps a dead
-- waiter queued longer): the owner still leaves, so a waiter refused its
-- own channel (lock.c) never stays queued, blocking the queue for a slot.

local ttl, keep_s, slot_s = ARGV[4], ARGV[5] or '-1', ARGV[6]
if not (string.match(ttl, '^[1-9]%d*$') and #ttl <= 15) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
if not (keep_s == '-1' or (string.match(keep_s, '^%d+$') and #keep_s <= 15)) then
  return redis.error_reply('ERR rlock: invalid hold count: ' .. keep_s)
end
if not (slot_s and string.match(slot_s, '^[1-9]%d*$') and #slot_s <= 15) then
  return redis.error_reply('ERR rlock: invalid waiter slot (ms): ' .. tostring(slot_s))
end
local owner = ARGV[2]
if owner == '' then return redis.error_reply('ERR rlock: empty owner id') end
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[3])
end
local keep, slot, stay = tonumber(keep_s), tonumber(slot_s), ARGV[7] == '1'

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

-- A waiter behind the owner that this user may tell (ACL): its deadline
-- moves down a slot and it is told; else neither (see above).
local function may_tell(w)
  return not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[3], KEYS[4] .. ':' .. w, ARGV[1])
end

-- the waiter this undo must tell, as the steps below will find it: the head
-- (after the owner left) when its last hold is given back
do
  local latch = redis.call('get', KEYS[5])
  if latch ~= 'undone' and latch ~= 'xd' and not (latch == 'x' and stay) then
    local q, tellw = redis.call('lrange', KEYS[2], 0, -1), {}
    local leaving = latch == 'x' or (latch == false and not stay)
    local held = tonumber(redis.call('hget', KEYS[1], owner) or '0') or 0
    if (latch == '1' and held == 1) or (latch == false and keep == 0 and held > 0) then
      for k = 1, #q do
        if not (leaving and q[k] == owner) then
          tellw[#tellw + 1] = q[k]
          break
        end
      end
    end
    local e = refused(ARGV[3], tellw, ARGV[1])
    if e then return e end
  end
end

local function tell_head()
  local head = redis.call('lindex', KEYS[2], 0)
  if head and redis.call('exists', KEYS[1]) == 0 then
    redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1])
  end
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

-- down to n holds of the owner (0: none); the head is told if the lock is free
local function keep_only(n)
  if n > 0 then
    redis.call('hset', KEYS[1], owner, n)
    return
  end
  redis.call('hdel', KEYS[1], owner)
  if redis.call('exists', KEYS[1]) == 0 then say_free(ARGV[3], ARGV[1]) end
  tell_head()
end

local reg = KEYS[6]
if reg and redis.acl_check_cmd and not redis.acl_check_cmd('hdel', reg, owner) then reg = nil end

-- Redisson's acquireFailed
local function leave()
  if reg then redis.call('hdel', reg, owner) end
  local q = redis.call('lrange', KEYS[2], 0, -1)
  local i = 1
  while i <= #q and q[i] ~= owner do i = i + 1 end
  for j = i + 1, #q do
    if may_tell(q[j]) then redis.call('zincrby', KEYS[3], -slot, q[j]) end
  end
  redis.call('zrem', KEYS[3], owner)
  redis.call('lrem', KEYS[2], 0, owner)
  -- every waiter behind me is told, the lock held or not: its deadline just
  -- moved down a slot, possibly to before its next try (a live rlock waiter
  -- then tries at once and keeps it alive); one this user may not tell kept
  -- its deadline
  for j = i + 1, #q do
    if q[j] ~= owner and may_tell(q[j]) then redis.call(ARGV[3], KEYS[4] .. ':' .. q[j], ARGV[1]) end
  end
end

local latch = redis.call('get', KEYS[5])
if latch == 'undone' or latch == 'xd' then return 2 end
if latch == 'x' then -- planted by an undo that kept the owner queued
  if stay then return 2 end
  redis.call('set', KEYS[5], 'xd', 'px', ttl)
  leave()
  return 0
end
if latch == '1' then -- applied: a grant pops the owner from the queue
  redis.call('set', KEYS[5], 'undone', 'px', ttl)
  local held = tonumber(redis.call('hget', KEYS[1], owner) or '0')
  if held > 0 then keep_only(held - 1) end
  return 1
end

redis.call('set', KEYS[5], stay and 'x' or 'xd', 'px', ttl)
if not stay then leave() end
local held = tonumber(redis.call('hget', KEYS[1], owner) or '0')
if keep >= 0 and held > keep then
  keep_only(keep)
  return 1
end
return 0
