local id = ARGV[5]
for i = 7, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i])
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZREM', KEYS[3], ARGV[i])
  end
end
local n, reclaimed = promote()
if redis.call('ZSCORE', KEYS[1], id) then
  redis.call('ZADD', KEYS[1], 'XX', now + lease, id)
  bump()
  return {epoch, version, learn_left(), 1, n, reclaimed, 0, 0}
end
if n < limit and now >= learn then
  redis.call('ZADD', KEYS[1], now + lease, id)
  bump()
  return {epoch, version, learn_left(), 1, n + 1, reclaimed, 0, 0}
end
if redis.call('ZSCORE', KEYS[2], id) == false then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), id)
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), id)
local wait = 0
if now < learn then
  wait = learn - now
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first[2] then wait = tonumber(first[2]) - now end
end
return {epoch, version, learn_left(), 0, n, reclaimed, wait, redis.call('ZRANK', KEYS[2], id)}
