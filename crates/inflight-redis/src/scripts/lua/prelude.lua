local seen_epoch = tonumber(ARGV[1])
local seen_version = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local lease = tonumber(ARGV[4])
local epoch, version, learn, behind = fence(KEYS[5], seen_epoch, seen_version, lease)
local function bump()
  version = redis.call('HINCRBY', KEYS[5], 'version', 1)
end
local function learn_more()
  if learn < now + lease then
    learn = now + lease
    redis.call('HSET', KEYS[5], 'learn', learn)
  end
end
local function learn_left()
  return math.max(learn - now, 0)
end
local function promote()
  local queued = redis.call('ZCARD', KEYS[2])
  if queued > 0 then
    local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
    for _, id in ipairs(gone) do
      queued = queued - redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
    end
  end
  local reclaimed = 0
  local n = redis.call('ZCARD', KEYS[1])
  if n >= limit then
    reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    n = n - reclaimed
  end
  if now < learn then
    return n, reclaimed, queued
  end
  local granted = 0
  while n < limit and queued > 0 do
    local popped = redis.call('ZPOPMIN', KEYS[2])
    local head = popped[1]
    if not head then break end
    -- A waiter asked under a limit of its own (after the last '/' of its id): a process whose
    -- limit was lowered is not let in past it by one that still runs the old one.
    local own = tonumber(string.match(head, '/(%d+)$'))
    if own and n >= own then
      redis.call('ZADD', KEYS[2], popped[2], head)
      break
    end
    redis.call('ZREM', KEYS[3], head)
    n = n + redis.call('ZADD', KEYS[1], now + lease, head)
    queued = queued - 1
    granted = granted + 1
    tell(head)
  end
  if granted > 0 then bump() end
  return n, reclaimed, queued
end
local function give_back(id)
  if redis.call('ZREM', KEYS[1], id) == 1 then
    return 1
  end
  if redis.call('ZREM', KEYS[2], id) == 1 then
    redis.call('ZREM', KEYS[3], id)
  end
  return 0
end
