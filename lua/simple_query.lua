-- simple_query.lua -- the queries of a simple lock, answered in the shapes of
-- the reentrant lock's hash commands (lock.c reads both alike).
-- KEYS[1]  NAME   ARGV[1] 'held' | 'count' | 'holders'   ARGV[2] token (owner id)
-- Reply: held    1 the key holds the token, else 0 (HEXISTS's shape)
--        count   '1' the key holds the token, else nil (HGET's shape)
--        holders {token, '1'} for the holder, {} when free (HGETALL's shape)
--        an error reply when NAME is not a string (not a simple lock).
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'string' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE rlock: ' .. kind .. ' is not a simple lock')
end
local token = redis.call('get', KEYS[1])
if ARGV[1] == 'held' then
  if token == ARGV[2] then return 1 end
  return 0
elseif ARGV[1] == 'count' then
  if token == ARGV[2] then return '1' end
  return nil
elseif ARGV[1] == 'holders' then
  if token then return {token, '1'} end
  return {}
end
return redis.error_reply('ERR rlock: unknown query: ' .. ARGV[1])
