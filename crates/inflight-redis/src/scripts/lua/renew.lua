local count = tonumber(ARGV[5])
local readded = 0
local lost = {}
for i = 6, 5 + count do
  local id = ARGV[i]
  local expiry = redis.call('ZSCORE', KEYS[1], id)
  if expiry and (tonumber(expiry) > now or behind) then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, id)
  elseif behind then
    redis.call('ZADD', KEYS[1], now + lease, id)
    readded = readded + 1
  else
    if expiry then redis.call('ZREM', KEYS[1], id) end
    lost[#lost + 1] = id
  end
end
for i = 6 + count, #ARGV do
  redis.call('ZADD', KEYS[1], now + lease, ARGV[i])
end
if readded > 0 then learn_more() end
bump()
return {epoch, version, learn_left(), readded, lost}
