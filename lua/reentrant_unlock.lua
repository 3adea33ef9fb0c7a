-- reentrant_unlock.lua -- release one hold of a reentrant lock (Redisson RLock unlock).
-- KEYS[1]  NAME   KEYS[2] channel "redisson_lock__channel:{NAME}"
-- KEYS[3]  unlock latch "redisson_unlock_latch:{NAME}:<request id>"
-- ARGV[1]  message ('0')   ARGV[2] TTL (ms) to keep while still held
-- ARGV[3]  owner id   ARGV[4] publish command (publish / spublish; none: the
--          spin lock's, which publishes nothing)
-- ARGV[5]  latch TTL (ms)
-- ARGV[6]  (optional) the hold count the client expects to be left; -1: no check
-- ARGV[7]  (optional) how many more holds the server may count (releases whose
--          outcome the client never saw, which it counts as done)
-- ARGV[8]  (optional; ARGV[6] >= 0 and ARGV[7] 0 then) the fast path's
--          unlatched form:
--          '0': the first copy, whose answer the client reads at once: it
--          writes a latch only for an answer a re-send could not tell from
--          the count (nil, -1, 2); a latch that exists already was written by
--          a re-send of this id, so this copy is late and changes nothing (nil);
--          '1': a re-send of such an id: a latch answers as usual; else a
--          count equal to the expected one means the first copy was applied
--          with answer 0 or 1 (the owner's field gone when 0 is expected:
--          released); then only the latch is written
-- Reply: 1 released (key deleted, message published, nobody subscribed);
--        2 released and the message reached subscribers (waiters exist: the client
--          then lets them go first, see docs/architecture.md "handoff");
--        0 still held (count > 0); nil this owner does not hold it;
--       -1 the count left disagreed with the client's: the owner's field was
--          removed (a loss; waiters woken if the lock is free now);
--        an error reply (nothing written) when an argument is invalid (the
--          lease and latch TTL: on the paths that use them), or the server's
--          refusal of the first write (READONLY, OOM) as it is.
-- A re-sent request gets its first answer (the latch). The outcome is decided
-- from the owner's count before anything is written, so one SET NX both stores
-- it in the latch and finds a re-send (the latch exists: its value is the answer;
-- 'n' for nil).

local lease, ttl = ARGV[2], ARGV[5]
-- a whole number written in decimal: 1 to 15 digits, no sign, no leading zero
local function count(s)
  if s == '0' or (#s <= 15 and string.find(s, '^[1-9]%d*$')) then return tonumber(s) end
end
local want = (ARGV[6] or '-1') == '-1' and -1 or count(ARGV[6])
local extra = count(ARGV[7] or '0')
local mark = ARGV[8]
local unlatched, first_copy = mark == '1', mark == '0' -- (any other value: an error below)
-- (the lease is checked where it is used, the latch TTL by the latch's SET:
-- both before the first write)
if ARGV[3] == '' then return redis.error_reply('ERR rlock: empty owner id') end
-- the publish command in any case (Redisson sends PUBLISH or SPUBLISH; the spin lock
-- none: nothing is published)
local pubcmd = string.lower(ARGV[4] or '')
if pubcmd ~= 'publish' and pubcmd ~= 'spublish' and pubcmd ~= 'none' then
  return redis.error_reply('ERR rlock: invalid publish command: ' .. ARGV[4])
end
-- a user that may not publish on the channel (a Redis 7 ACL without it) is
-- refused before anything is written (redis.acl_check_cmd: Redis 7.0 on)
if pubcmd ~= 'none' and redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[4], KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM rlock: this user may not ' .. ARGV[4] .. ' to the channel ' .. KEYS[2] ..
    ' (its ACL needs &' .. KEYS[2] .. ' or a channel pattern matching it)')
end
-- counts: whole numbers below 10^15; want may be -1 (no check)
if not want or not extra then
  return redis.error_reply('ERR rlock: invalid expected count')
end
if mark and (not (unlatched or first_copy) or want < 0 or extra > 0) then
  return redis.error_reply('ERR rlock: invalid re-send mark: ' .. mark)
end
-- the first copy's latch TTL is checked here: it may write none
if first_copy and (#ttl > 15 or not string.find(ttl, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
end

local held = redis.call('hget', KEYS[1], ARGV[3])
if held then
  -- the owner's count as HINCRBY writes it; anything else is not a hold this
  -- script can count down (nothing written). A count of 16 to 19 digits is
  -- more than any client took: a mismatch when the client sent its count.
  local n = count(held)
  if not n and want >= 0 and #held <= 19 and string.find(held, '^[1-9]%d*$')
      and (#held < 19 or held <= '9223372036854775807') then
    n = math.huge
  end
  if not n or n == 0 then
    return redis.error_reply('ERR rlock: hold count is not a whole number from 1 to 10^15: ' .. held)
  end
  held = n
end
local left, out, done
if unlatched and (held and held == want or not held and want == 0) then
  -- the first copy (no latch) was applied: its answer, nothing more to do
  done, out = true, want > 0 and 0 or 1
elseif not held then
  -- not held (any more): nil, stored too ('n'), so that a late copy of this
  -- request never releases a hold the owner takes after this answer
  out = 'n'
else
  left, out = held - 1, 1
  if want >= 0 and (left < want or left > want + extra) then
    out = -1 -- not the holds the client took
  else
    -- the releases whose outcome the client never saw did not land: they count now
    if want >= 0 and left > want then left = want end
    if left > 0 then out = 0 end
  end
end
-- still held: the TTL to set, in ms: 1 to 15 decimal digits, no leading zero
if out == 0 and (#lease > 15 or not string.find(lease, '^[1-9]%d*$')) then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
if first_copy then
  -- a late first copy if a re-send of this id wrote the latch
  if redis.call('exists', KEYS[3]) == 1 then return nil end
  -- an answer a re-send cannot read from the count is kept (2: below)
  if out == 'n' or out == -1 then redis.call('set', KEYS[3], out, 'px', ttl) end
else
  local first = redis.pcall('set', KEYS[3], out, 'px', ttl, 'nx')
  if not first then
    return tonumber(redis.call('get', KEYS[3])) -- a re-send: the first answer ('n': nil)
  elseif first.err then
    -- nothing written: a bad latch TTL, else the server's own error as it is
    -- (READONLY on a replica, OOM, ...)
    if #ttl > 15 or not string.find(ttl, '^[1-9]%d*$') then
      return redis.error_reply('ERR rlock: invalid latch TTL (ms): ' .. ttl)
    end
    return first
  end
end

-- the unlock message; how many subscribers heard it (none: not sent)
local function notify()
  if ARGV[4] == 'none' then return 0 end
  return redis.call(ARGV[4], KEYS[2], ARGV[1])
end

if done then return out end
if out == 'n' then return nil end
if out == -1 then
  -- drop all of the owner's holds; free the lock if nobody else holds it
  redis.call('hdel', KEYS[1], ARGV[3])
  if redis.call('exists', KEYS[1]) == 0 then
    notify()
  end
  return -1
end
if out == 0 then
  redis.call('hset', KEYS[1], ARGV[3], left)
  redis.call('pexpire', KEYS[1], lease)
  return 0
end
redis.call('del', KEYS[1])
if notify() > 0 then
  redis.call('set', KEYS[3], '2', 'px', ttl)
  return 2
end
return 1
