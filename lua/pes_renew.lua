-- pes_renew.lua -- the watchdog's batched renewal of permits taken with the
-- watchdog (past Redisson, whose permits expire only at a fixed lease): the
-- permit's score in "{NAME}:timeout" moves to now + lease, as Redisson's
-- updateLeaseTime does.
-- KEYS[i]    the semaphore names (the zset "{NAME}:timeout", or
--            "NAME:timeout" when NAME holds '{', is in the same slot)
-- ARGV[1]    lease (ms), or '=' and the lease: set exactly (MultiLock), or
--            '?': only ask, no score is touched
-- ARGV[i + 1] the permit id (32 lowercase hex) held of KEYS[i]
-- ARGV[#KEYS + 2] (optional) now: the client's wall clock (epoch ms), as
--            Redisson's updateLeaseTime sends it; without it the server's
--            clock (TIME). Expiry is judged on the clients' wall clocks
--            (another client's acquire reclaims a score <= its now): a score
--            from the server's clock, behind theirs, would end the permit
--            before its holder's valid-until.
-- Reply: a string, one character per name: '1' where the permit is alive
-- (in the zset and not expired: its score is now at least now + lease), '0'
-- where it is not (expired or released: the client stops renewing it, the
-- permit is lost); an error reply for a bad lease or time.
if redis.replicate_commands then pcall(redis.replicate_commands) end
local ask = ARGV[1] == '?'
local exact = string.sub(ARGV[1], 1, 1) == '='
local lease = exact and string.sub(ARGV[1], 2) or ARGV[1]
if not ask and not (string.match(lease, '^[1-9]%d*$') and #lease <= 15) then
  return redis.error_reply('ERR rlock: invalid lease (ms): ' .. lease)
end
local now
local given = ARGV[#KEYS + 2]
if given then
  if not (string.match(given, '^[1-9]%d*$') and #given <= 15) then
    return redis.error_reply('ERR rlock: invalid time (ms): ' .. given)
  end
  now = tonumber(given)
else
  local t = redis.call('time')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local until_ms = now + (tonumber(lease) or 0)
local out = {}
for i = 1, #KEYS do
  local alive = false
  local h = ARGV[i + 1] or ''
  if #h == 32 and string.match(h, '^[0-9a-f]+$') then
    local zset = string.find(KEYS[i], '{', 1, true) and (KEYS[i] .. ':timeout') or ('{' .. KEYS[i] .. '}:timeout')
    local id = string.gsub(h, '..', function(c) return string.char(tonumber(c, 16)) end)
    local score = redis.call('zscore', zset, id)
    if score == '922337203685477' then
      alive = true
    elseif score and tonumber(score) > now then
      alive = true
      if not ask and (exact or tonumber(score) < until_ms) then
        redis.call('zadd', zset, until_ms, id)
      end
    end
  end
  out[i] = alive and '1' or '0'
end
return table.concat(out)
