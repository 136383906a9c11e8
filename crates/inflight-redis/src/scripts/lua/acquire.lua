local id = ARGV[5]
local first = ARGV[7] == '1'
for i = 8, #ARGV do
  give_back(ARGV[i])
end
local n, reclaimed, queued = promote()
if not first and redis.call('ZSCORE', KEYS[1], id) then
  redis.call('ZADD', KEYS[1], 'XX', now + lease, id)
  bump()
  return {epoch, version, learn_left(), 1, n, reclaimed, 0, 0}
end
if n < limit and now >= learn then
  if not first and redis.call('ZREM', KEYS[2], id) == 1 then
    -- Queued behind a waiter of a lower limit of its own, which keeps the queue's head.
    redis.call('ZREM', KEYS[3], id)
  end
  redis.call('ZADD', KEYS[1], now + lease, id)
  bump()
  return {epoch, version, learn_left(), 1, n + 1, reclaimed, 0, 0}
end
local ahead = queued
if first or redis.call('ZSCORE', KEYS[2], id) == false then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), id)
else
  ahead = redis.call('ZRANK', KEYS[2], id)
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), id)
local wait = 0
if now < learn then
  wait = learn - now
else
  local first_expiry = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first_expiry[2] then wait = tonumber(first_expiry[2]) - now end
end
return {epoch, version, learn_left(), 0, n, reclaimed, wait, ahead}
