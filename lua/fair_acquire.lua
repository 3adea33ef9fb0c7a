-- fair_acquire.lua -- take, re-enter or queue for a fair lock (Redisson RFairLock format).
-- KEYS[1]  NAME: a hash, owner id -> hold count; the key's TTL is the lease
-- KEYS[2]  the queue "redisson_lock_queue:{NAME}": a list of owner ids, FIFO
-- KEYS[3]  the deadlines "redisson_lock_timeout:{NAME}": a zset, owner id -> the
--          epoch ms after which that waiter counts as gone (stale)
-- KEYS[4]  the channel prefix "redisson_lock__channel:{NAME}": a waiter listens
--          on KEYS[4] .. ':' .. its owner id
-- KEYS[5]  acquire latch "rlock_acquire_latch:{NAME}:<request id>"
-- ARGV[1]  lease (ms)   ARGV[2] owner id
-- ARGV[3]  the waiter's slot (ms): Redisson's "wait", added to a deadline when
--          it queues and taken off every deadline when it acquires
-- ARGV[4]  now (epoch ms, the client's wall clock)   ARGV[5] latch TTL (ms)
-- ARGV[6]  'q': queue when busy (Redisson's tryLock(wait)/lock() script);
--          't': never queue (Redisson's tryLock() script)
-- ARGV[7]  '1': not reentrant (the holder's second acquire is refused, -5)
-- ARGV[8]  publish command (publish / spublish)
-- rlock's handoff (optional; without KEYS[6] none of it):
-- KEYS[6]  the handoff registry "rlock_acquire_latch:{NAME}:handoff": a hash, owner id
--          -> "<lease>,<slot>,<latch TTL>,<request id>,<latch key>" of a
--          waiter that fair_unlock.lua may grant the lock to directly
-- KEYS[7]  the latch of the owner's last try that was answered busy (its
--          registered request; KEYS[5] itself when there is none)
-- ARGV[9]  this request's id when the owner may be granted directly (a
--          watchdog lease), '' when not (its registration is removed)
-- Reply: nil when acquired (also: the unlock granted the owner's registered
-- request KEYS[7] directly, and this try takes that hold over); an integer >= 1: busy, try again within that many
-- ms at most (or when a message comes on the owner's channel); -3 this request
-- was undone (fair_acquire_undo.lua); -5 the owner holds this non-reentrant
-- lock already (nothing written); an error reply (nothing written) for a bad
-- argument, or the server's refusal of the first write (READONLY, OOM) as it is.
-- Redisson's steps, in its order: stale heads evicted (only heads whose
-- deadline passed); free and (no queue or the head is me): pop me, every
-- deadline moves down by my slot, HSET, PEXPIRE (nobody else waiting: one
-- DEL of the queue and the deadlines, the same end state); my field: re-entry; else
-- ('q') already queued, or queued at the tail with deadline = (the last
-- waiter's deadline - now, or the PTTL) + slot + now. rlock's additions: the
-- latch (a re-sent request counts once); a caller is never evicted as stale
-- (it is alive: it is asking); a head without a deadline is evicted (below);
-- a queued caller whose deadline is less than
-- 3/4 of its slot away, or the head whose deadline is more than a slot away,
-- moves it to now + slot and moves every waiter behind it by the same amount
-- (the gaps Redisson's arithmetic keeps are kept); when
-- a head is evicted or takes the lock, the next head is told on its channel
-- (on a grant also every waiter whose deadline it brings within a slot of now);
-- the busy reply is a wait bound, not Redisson's PTTL. Every read comes
-- first (the queue and the PTTL once each), then the ACL check, then the
-- writes in Redisson's order.

local lease, owner, slot_s, now_s, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
-- the four numbers (1 to 15 digits, no leading zero) in one match; one by
-- one only to say which is wrong
if not (#lease <= 15 and #slot_s <= 15 and #now_s <= 15 and #ttl <= 15 and
        string.find(lease .. ',' .. slot_s .. ',' .. now_s .. ',' .. ttl, '^[1-9]%d*,[1-9]%d*,[1-9]%d*,[1-9]%d*$')) then
  local function ms(s) return #s <= 15 and string.find(s, '^[1-9]%d*$') end
  if not ms(lease) then return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease) end
  if not ms(slot_s) then return redis.error_reply('ERR rlock: invalid waiter slot (ms): ' .. slot_s) end
  if not ms(now_s) then return redis.error_reply('ERR rlock: invalid time (epoch ms): ' .. now_s) end
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end
if owner == '' then return redis.error_reply('ERR rlock: empty owner id') end
local mode, once = ARGV[6], ARGV[7] == '1'
if mode ~= 'q' and mode ~= 't' then return redis.error_reply('ERR rlock: invalid mode: ' .. tostring(mode)) end
if ARGV[8] ~= 'publish' and ARGV[8] ~= 'spublish' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. tostring(ARGV[8]))
end
local slot, now = tonumber(slot_s), tonumber(now_s)
local reg_id = ARGV[9] or ''
if reg_id ~= '' and not string.find(reg_id, '^%x+$') then
  return redis.error_reply('ERR rlock: invalid request id: ' .. reg_id)
end
-- the registry only where this user may write it (ACL): else no handoff
local reg = KEYS[6]
if reg and redis.acl_check_cmd and not redis.acl_check_cmd('hset', reg, owner, 'x') then reg = nil end

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

-- the first write: the latch, the check that this request is new. true, or
-- a reply (nil: a re-send of a request that was applied; -3: undone)
local function latch_new()
  local l = redis.pcall('set', KEYS[5], '1', 'px', ttl, 'nx')
  if l and l.err then return false, l end
  if l then return true end
  if redis.call('get', KEYS[5]) == '1' then return false, nil end
  return false, -3
end

local function tell(head) -- a waiter's channel: try again now
  redis.call(ARGV[8], KEYS[4] .. ':' .. head, '0')
end

-- The reads, once: the queue, the stale heads step 1 evicts (from the head,
-- each waiter whose deadline passed; never the caller: it is alive), the
-- lock's PTTL and the caller's hold count. q[i] is the head after the
-- eviction; hs its deadline as read (nil when it is the caller). rlock's
-- addition: a head without a deadline is stale too. Every live waiter has
-- one (Redisson's and rlock's scripts write it with the entry, and a waiter
-- that finds its own gone writes it again), so nobody keeps such an entry
-- alive; Redisson's loop stops at it, and the queue behind it waits for good.
local q = redis.call('lrange', KEYS[2], '0', '-1') -- (strings: a Lua number argument costs the server a printf)
local i, gone, hs = 1, {}, nil
while q[i] and q[i] ~= owner do
  local t = not gone[q[i]] and redis.call('zscore', KEYS[3], q[i])
  if t and tonumber(t) > now then
    hs = t
    break
  end
  gone[q[i]] = true -- (a name listed twice has no deadline after its eviction)
  i = i + 1
end
local head, evicted = q[i], i > 1
local held_for = redis.call('pttl', KEYS[1]) -- -2 free, -1 no TTL
local mine = held_for ~= -2 and redis.call('hget', KEYS[1], owner)
local grant = held_for == -2 and (not head or head == owner)
-- the unlock granted my registered request (fair_unlock.lua's handoff)
-- and I did not hear its message: this try takes that hold over
local handed = mine and KEYS[7] and KEYS[7] ~= KEYS[5] and redis.call('get', KEYS[7]) == '1'

-- the waiter this try tells, checked before the first write: the next head
-- when the caller takes the lock (step 2), else the new head after an
-- eviction (a re-entry tells nobody)
local told
if grant then
  told = q[i + 1]
elseif evicted and not mine then
  told = head
end
if told then
  local e = refused(ARGV[8], told, '0')
  if e then return e end
end

-- 1. stale heads
for j = 1, i - 1 do
  redis.call('zrem', KEYS[3], q[j])
  redis.call('lpop', KEYS[2])
  if reg then redis.call('hdel', reg, q[j]) end
end

-- 2. free and my turn
if grant then
  local ok, out = latch_new()
  if not ok then return out end
  local nxt = q[i + 1]
  -- every deadline left after step 1, mine among them (in score order)
  local all = redis.call('zrange', KEYS[3], '0', '-1')
  local near = {}
  if not nxt and (not all[1] or all[1] == owner and not all[2]) then
    -- nobody else waits: Redisson's LPOP and ZREM empty the queue and the
    -- deadlines, one DEL does the same (the grant of a handoff, a free lock)
    if head or all[1] then redis.call('del', KEYS[2], KEYS[3]) end
  else
    if head then redis.call('lpop', KEYS[2]) end -- (no head: the queue is empty)
    -- my deadline goes, every other moves down by my slot (Redisson's); a
    -- waiter whose deadline that brings within my slot of now is told as
    -- well: a client with a shorter slot counted on a drop of its own slot
    -- per waiter ahead, and would go stale before its next try (evicted
    -- while alive)
    local down = '-' .. slot_s -- (a string: a Lua number argument costs the server a printf)
    for k = 1, #all do
      local w = all[k]
      if w == owner then
        redis.call('zrem', KEYS[3], owner)
      else
        local d = tonumber(redis.call('zincrby', KEYS[3], down, w))
        if w ~= nxt and d < now + slot then near[#near + 1] = w end
      end
    end
  end
  redis.call('hset', KEYS[1], owner, '1')
  redis.call('pexpire', KEYS[1], lease)
  if reg then redis.call('hdel', reg, owner) end
  if nxt then tell(nxt) end -- the next head: it keeps its deadline alive from now on
  for _, w in ipairs(near) do -- (only those this user may publish to: a courtesy, not a need)
    if not redis.acl_check_cmd or redis.acl_check_cmd(ARGV[8], KEYS[4] .. ':' .. w, '0') then tell(w) end
  end
  return nil
end

-- 3. re-entry
if mine then
  local seen = redis.call('get', KEYS[5])
  if seen == '1' then return nil elseif seen then return -3 end
  if handed then -- the handoff's hold is this request's: no second level
    local ok, out = latch_new()
    if not ok then return out end
    if held_for < tonumber(lease) then redis.call('pexpire', KEYS[1], lease) end
    return nil
  end
  if once then return -5 end
  if not (string.find(mine, '^[1-9]%d*$') and (#mine < 19 or #mine == 19 and mine < '9223372036854775807')) then
    return redis.error_reply('ERR rlock: hold count cannot be raised (a whole number from 1 to 2^63-2 expected): ' .. mine)
  end
  local ok, out = latch_new()
  if not ok then return out end
  redis.call('hincrby', KEYS[1], owner, '1')
  if held_for < tonumber(lease) then redis.call('pexpire', KEYS[1], lease) end
  return nil
end

-- the new head: the lock is its to take, or (held) its deadline must be kept
-- alive by its own tries from now on
if evicted and head then tell(head) end

-- 4. busy
if mode == 't' then return held_for > 0 and held_for or 1 end
local seen = redis.call('get', KEYS[5])
if seen and seen ~= '1' then return -3 end -- undone: a late copy never queues
-- a copy of a request that was granted: it was applied once, it writes no
-- more (queuing it would leave an entry nobody waits behind)
if seen == '1' then return held_for > 0 and held_for or 1 end

-- ahead: the waiters before my entry (a new waiter: the whole queue)
local ahead = 0
while q[i + ahead] and q[i + ahead] ~= owner do ahead = ahead + 1 end
local listed = q[i + ahead] == owner

-- my deadline; a new waiter's comes from Redisson's arithmetic, written at
-- step 5 below (after the refresh, which may move it). rlock's additions:
-- my entry without a deadline (a name listed twice whose other copy was
-- evicted or granted, a key lost) gets one, a slot per waiter ahead of now,
-- and no second entry; a deadline without an entry queues at the tail anew
-- (Redisson's script would never list it: the waiter would wait until the
-- queue is empty).
local mys = listed and redis.call('zscore', KEYS[3], owner)
local written = mys -- my deadline as the server has it
if mys then
  mys = tonumber(mys)
elseif listed then
  mys = now + (ahead + 1) * slot
else
  local last = #q >= i and q[#q] -- the tail after the eviction
  local ls = last and redis.call('zscore', KEYS[3], last)
  local base = ls and tonumber(ls) - now or held_for
  mys = base + slot + now
end

-- keep my entry alive. Every acquire ahead of me moves my deadline down a
-- slot (Redisson's arithmetic) and tells only the next head, so what keeps me
-- safe is my deadline less a slot per waiter ahead of me ('eff': what my
-- deadline is when I reach the head if every one ahead acquires or leaves).
-- An acquire or a leave ahead leaves eff as it was (one slot off the deadline,
-- one waiter less ahead); an eviction raises it by a slot. eff is kept at
-- least 3/4 of a slot ahead of now, the head's (eff is its deadline) exactly
-- one slot ahead, so that it stops blocking the queue one slot after it
-- died. Those behind me move by the same amount (Redisson's gaps kept).
local eff = mys - ahead * slot
local target = now + slot
local moved = false
if eff < now + slot * 3 / 4 or (eff > target and ahead == 0) then
  local delta = target - eff
  for j = i + ahead + 1, #q do
    local w = q[j]
    if w ~= owner and redis.call('zscore', KEYS[3], w) then
      local d = redis.call('zincrby', KEYS[3], delta, w)
      if w == head then hs = d end -- (a name listed twice)
    end
  end
  mys = mys + delta
  eff = target
  moved = true
end
if not listed then
  -- 5. queue at the tail, with my deadline as just found
  redis.call('zadd', KEYS[3], mys, owner)
  redis.call('rpush', KEYS[2], owner)
elseif moved or not written then
  redis.call('zadd', KEYS[3], mys, owner)
end
-- rlock's handoff: what fair_unlock.lua needs to grant me the lock directly
-- (this request, my lease, my slot), or nothing; the registry lives two
-- slots past the last registration (never shortened)
if reg and reg_id ~= '' then
  redis.call('hset', reg, owner, lease .. ',' .. slot_s .. ',' .. ttl .. ',' .. reg_id .. ',' .. KEYS[5])
  if redis.call('pttl', reg) < 2 * slot then redis.call('pexpire', reg, string.format('%.0f', 2 * slot)) end
elseif reg then
  redis.call('hdel', reg, owner)
end

-- how long to wait at most: until my next refresh is due (eff half a slot
-- away: no acquire, leave or eviction ahead brings my deadline below eff),
-- the holder's TTL (a lost message costs no more), or the head's deadline
-- when the lock is free but not mine or I am next (a dead head is evicted
-- then: no polling behind it, and no waiting past its deadline)
local bound = eff - now - slot / 2
if held_for >= 0 and held_for < bound then bound = held_for end
if head and head ~= owner and (held_for == -2 or ahead == 1) then
  if hs and tonumber(hs) - now < bound then bound = tonumber(hs) - now end
end
bound = math.floor(bound)
if bound < 1 then bound = 1 end
return bound
