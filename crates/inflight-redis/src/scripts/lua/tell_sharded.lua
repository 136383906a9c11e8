local budget_prefix = (string.gsub(KEYS[1], ':[^:]*$', ''))
local function tell(id)
  redis.call('SPUBLISH', budget_prefix .. ':grants:' .. string.sub(id, 1, TOKEN_LEN), id)
end
