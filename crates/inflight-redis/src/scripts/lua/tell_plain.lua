local function channel(id) return 'inflight:grants:' .. string.sub(id, 1, TOKEN_LEN) end
local function tell(id)
  redis.call('PUBLISH', channel(id), id)
end
local function alive(id)
  return redis.call('PUBSUB', 'NUMSUB', channel(id))[2] > 0
end
