-- fair_unlock.lua -- release one hold of a fair lock (Redisson RFairLock unlock).
-- KEYS[1]  NAME   KEYS[2] queue   KEYS[3] deadlines (zset)
-- KEYS[4]  channel prefix "redisson_lock__channel:{NAME}"
-- KEYS[5]  unlock latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  message ('0')   ARGV[2] TTL (ms) to keep while still held
-- ARGV[3]  owner id   ARGV[4] publish command   ARGV[5] latch TTL (ms)
-- ARGV[6]  the hold count the client expects to be left; -1: no check
-- ARGV[7]  how many more the server may count (unlocks whose outcome the
--          client never saw)
-- ARGV[8]  now (epoch ms)
-- KEYS[6]  optional: rlock's handoff registry "rlock_acquire_latch:{NAME}:handoff"
--          (fair_acquire.lua)
-- Reply: the latch's value if it exists (a re-send: nil for 'n'); 0 still
--        held; 1 released (the queue's head told on its own channel); nil
--        this owner does not hold it (if nobody does, the head is told all
--        the same); -1 the count disagreed with the client's: the owner's
--        field removed (the head told if the lock is free); an error reply
--        (nothing written) for a bad argument.
-- Redisson's steps: the latch, stale heads evicted, free -> wake the head,
-- not mine -> nil, decrement (PEXPIRE) or DEL and publish '0' on
-- KEYS[4] .. ':' .. head only. rlock's differences: a free lock answers nil
-- (Redisson: 1, success), the count check of reentrant_unlock.lua, and the
-- latch keeps nil ('n') and -1 too; a lock it frees is said free on KEYS[4]
-- itself (for free-waiters). The queue is read first (its head once), then
-- the ACL checked, then the writes made.
-- rlock's handoff: when this unlock frees the lock and the head is an rlock
-- waiter that registered its last try (KEYS[6]) and is subscribed to its
-- channel now, the head is granted the lock here, with the steps its own
-- try would take (fair_acquire.lua's grant: popped, every other deadline
-- down by its slot, HSET, PEXPIRE its lease, the next head told) and its
-- registered try's latch set to '1' as if that try had been granted; the
-- message on its channel is "g:<request id>" instead of '0'. A re-send of
-- that try, the owner's next try (KEYS[7] there) and its undo all read that
-- latch. Nobody subscribed, a tombstone on that latch, or a channel or key
-- this user may not write: the head is told '0' as Redisson's unlock does.

local lease, owner, ttl, now_s = ARGV[2], ARGV[3], ARGV[5], ARGV[8]
local function count(s)
  if s == '0' or (#s <= 15 and string.find(s, '^[1-9]%d*$')) then return tonumber(s) end
end
local want = (ARGV[6] or '-1') == '-1' and -1 or count(ARGV[6])
local extra = count(ARGV[7] or '0')
if owner == '' then return redis.error_reply('ERR rlock: empty owner id') end
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[4])
end
if not want or not extra then return redis.error_reply('ERR rlock: invalid expected count') end
if not (#ttl <= 15 and string.find(ttl, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
if not (now_s and #now_s <= 15 and string.find(now_s, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid time (epoch ms): ' .. tostring(now_s))
end
local now = tonumber(now_s)

-- ACL (Redis 7): the waiter channel this script may publish to is checked
-- before its first write; a user that may not publish to it gets NOPERM and
-- nothing is written (redis.acl_check_cmd: Redis 7.0 on; without it nothing
-- is checked). The channel is checked as it is: an ACL channel pattern may
-- allow one waiter's channel and not another's.
local function refused(cmd, w, msg)
  if not redis.acl_check_cmd then return nil end
  local ch = KEYS[4] .. ':' .. w
  if not redis.acl_check_cmd(cmd, ch, msg) then
    return redis.error_reply('NOPERM rlock: this user may not ' .. cmd .. ' to the channel ' .. ch ..
      ' (its ACL needs &' .. ch .. ' or a channel pattern matching it)')
  end
end

local seen = redis.call('get', KEYS[5])
if seen then return tonumber(seen) end -- a re-send: the first answer ('n': nil)

-- The reads, once: the stale heads Redisson's loop evicts below (from the
-- head, each waiter whose deadline passed) and the head after them, the only
-- waiter this unlock may tell. It is checked whatever the count, as
-- reentrant_unlock.lua does.
local stale, gone, head = {}, {}, nil
while true do
  head = redis.call('lindex', KEYS[2], #stale == 0 and '0' or #stale) -- ('0': a Lua number costs the server a printf)
  if not head then break end
  local t = not gone[head] and redis.call('zscore', KEYS[3], head)
  if t and tonumber(t) > now then break end -- (rlock's addition: a head without a deadline is stale, fair_acquire.lua)
  gone[head] = true -- (a name listed twice has no deadline after its eviction)
  stale[#stale + 1] = head
end
if head then
  local e = refused(ARGV[4], head, ARGV[1])
  if e then return e end
end

-- rlock's handoff to the head (above): read and checked here, done below
local hand
if head and KEYS[6] then
  local function may(...) return not redis.acl_check_cmd or redis.acl_check_cmd(...) end
  local r = may('hget', KEYS[6], head) and redis.call('hget', KEYS[6], head)
  local l, s, t, id, lk
  if r then l, s, t, id, lk = string.match(r, '^([1-9]%d*),([1-9]%d*),([1-9]%d*),(%x+),(.+)$') end
  -- the latch is that try's own, the registry's sibling "...:<id>" (never a
  -- key the entry names otherwise: this script writes it with its caller's
  -- rights, and any user of the lock may write the registry). (A NAME with
  -- a '{' and no tag may, about once in 8192, have the two in different
  -- forms (names.c): no handoff for it, the head is told '0'.)
  if lk and not (string.sub(KEYS[6], -8) == ':handoff' and lk == string.sub(KEYS[6], 1, -8) .. id) then l = nil end
  if l and #l <= 15 and #s <= 15 and #t <= 15 and may('set', lk, '1', 'px', t) and may('hdel', KEYS[6], head) then
    local nxt = redis.call('lindex', KEYS[2], tostring(#stale + 1))
    local how, ch = ARGV[4] == 'spublish' and 'shardnumsub' or 'numsub', KEYS[4] .. ':' .. head
    local sub = may('pubsub', how, ch) and redis.pcall('pubsub', how, ch)
    if type(sub) == 'table' and tonumber(sub[2] or 0) > 0 and may('exists', lk) and redis.call('exists', lk) == 0 and
        (not nxt or not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[4], KEYS[4] .. ':' .. nxt, '0')) then
      hand = {lease = l, slot = s, ttl = t, id = id, latch = lk, nxt = nxt}
    end
  end
end

-- stale heads (Redisson's loop)
for _, w in ipairs(stale) do
  redis.call('zrem', KEYS[3], w)
  redis.call('lpop', KEYS[2])
end

local function tell_head()
  if head then redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1]) end
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

local held = redis.call('hget', KEYS[1], owner)
if held then
  local n = count(held)
  if not n and want >= 0 and #held <= 19 and string.find(held, '^[1-9]%d*$') then n = math.huge end
  if not n or n == 0 then
    return redis.error_reply('ERR rlock: hold count is not a whole number from 1 to 10^15: ' .. held)
  end
  held = n
end
local left, out
if not held then
  out = 'n'
else
  left, out = held - 1, 1
  if want >= 0 and (left < want or left > want + extra) then
    out = -1
  else
    if want >= 0 and left > want then left = want end
    if left > 0 then out = 0 end
  end
end
if out == 0 and not (#lease <= 15 and string.find(lease, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
-- (the value as a string: a Lua number argument costs the server a printf)
local first = redis.pcall('set', KEYS[5], out == 1 and '1' or out == 0 and '0' or out == -1 and '-1' or out, 'px', ttl)
if first.err then return first end -- nothing written (READONLY, OOM, ...)

if out == 'n' then
  if redis.call('exists', KEYS[1]) == 0 then tell_head() end -- as Redisson: a free lock wakes the head
  return nil
end
if out == -1 then
  redis.call('hdel', KEYS[1], owner)
  if redis.call('exists', KEYS[1]) == 0 then
    say_free(ARGV[4], ARGV[1])
    tell_head()
  end
  return -1
end
if out == 0 then
  redis.call('hset', KEYS[1], owner, left)
  redis.call('pexpire', KEYS[1], lease)
  return 0
end
redis.call('del', KEYS[1])
if hand then
  -- the head's grant, as fair_acquire.lua's step 2 makes it for its owner
  local all, slot, near = redis.call('zrange', KEYS[3], '0', '-1'), tonumber(hand.slot), {}
  if not hand.nxt and (not all[1] or all[1] == head and not all[2]) then
    redis.call('del', KEYS[2], KEYS[3])
  else
    redis.call('lpop', KEYS[2])
    local down = '-' .. hand.slot
    for k = 1, #all do
      local w = all[k]
      if w == head then
        redis.call('zrem', KEYS[3], head)
      else
        local d = tonumber(redis.call('zincrby', KEYS[3], down, w))
        if w ~= hand.nxt and d < now + slot then near[#near + 1] = w end
      end
    end
  end
  redis.call('hset', KEYS[1], head, '1')
  redis.call('pexpire', KEYS[1], hand.lease)
  -- the latch lives as long as the hold can without its owner knowing (its
  -- lease, nobody renews it), at least the latch TTL: the owner's next try
  -- after a lost message, due within its wait bound (up to half its slot,
  -- which may be longer than the latch TTL), must find it, or it would
  -- re-enter (a second level the client never counts)
  local lt = tonumber(hand.ttl) < tonumber(hand.lease) and hand.lease or hand.ttl
  redis.call('set', hand.latch, '1', 'px', lt)
  redis.call('hdel', KEYS[6], head)
  redis.call(ARGV[4], KEYS[4] .. ':' .. head, 'g:' .. hand.id)
  if hand.nxt then redis.call(ARGV[4], KEYS[4] .. ':' .. hand.nxt, ARGV[1]) end
  for _, w in ipairs(near) do
    if not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[4], KEYS[4] .. ':' .. w, ARGV[1]) then
      redis.call(ARGV[4], KEYS[4] .. ':' .. w, ARGV[1])
    end
  end
  return 1
end
say_free(ARGV[4], ARGV[1])
tell_head()
return 1
