local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function fence(key, seen_epoch, seen_version, lease)
  local m = redis.call('HMGET', key, 'epoch', 'version', 'learn')
  local epoch, version, learn = tonumber(m[1]), tonumber(m[2]) or 0, tonumber(m[3]) or 0
  local behind = false
  if not epoch then
    epoch, version, learn = now_us, 0, 0
    if seen_epoch ~= 0 then
      learn = now + lease
      behind = true
    end
    redis.call('HSET', key, 'epoch', epoch, 'version', 0, 'learn', learn)
  elseif seen_epoch > epoch or (seen_epoch == epoch and seen_version > version) then
    epoch = math.max(now_us, seen_epoch + 1, epoch + 1)
    learn = now + lease
    behind = true
    redis.call('HSET', key, 'epoch', epoch, 'learn', learn)
  elseif seen_epoch ~= 0 and seen_epoch < epoch then
    behind = true
  end
  return epoch, version, learn, behind
end
