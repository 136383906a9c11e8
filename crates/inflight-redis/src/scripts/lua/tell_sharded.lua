local budget_prefix = (string.gsub(KEYS[1], ':[^:]*$', ''))
local function channel(id) return budget_prefix .. ':grants:' .. string.sub(id, 1, TOKEN_LEN) end
local function tell(id)
  redis.call('SPUBLISH', channel(id), id)
end
local function alive(id)
  return redis.call('PUBSUB', 'SHARDNUMSUB', channel(id))[2] > 0
end
