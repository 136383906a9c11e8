local function tell(id)
  redis.call('PUBLISH', 'inflight:grants:' .. string.sub(id, 1, TOKEN_LEN), id)
end
