local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3] or '0')
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then
  tat = now
  -- A budget whose state Redis lost: its epoch began with learning. The burst is taken as
  -- spent at the loss (callers may have used it just before), refilling from there.
  if KEYS[2] then
    local m = redis.call('HMGET', KEYS[2], 'epoch', 'learn')
    if m[1] and tonumber(m[2] or 0) > 0 then
      tat = tonumber(m[1]) + interval * burst
    end
  end
end
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - interval * burst
local wait = allow_at - now
if wait < 0 then wait = 0 end
if wait > max_wait then
  return {0, wait}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, wait}
