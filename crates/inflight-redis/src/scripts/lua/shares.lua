local me = ARGV[1]
local wants = tonumber(ARGV[2])
local holding = tonumber(ARGV[3])
local seq = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local lease = tonumber(ARGV[6])
local epoch, version, learn, behind = fence(KEYS[2], tonumber(ARGV[8]), tonumber(ARGV[9]), lease)
local learning = now < learn
local term = math.max(math.floor(lease / 6), 1)
-- An entry lives a lease after its report; one that reserves nothing and only waits for a turn
-- (its base is 0), three: it renews less often, and a turn is not handed to a process that is
-- gone (`alive`).
local wait_life = 3 * lease
local sums = redis.call('HMGET', KEYS[7], 'reserved', 'wants', 'n')
local reserved, total, n = tonumber(sums[1]) or 0, tonumber(sums[2]) or 0, tonumber(sums[3]) or 0
-- An entry: held, wants, expiry, last seq (processes of earlier versions read the same).
local function parse(raw)
  local h, w, e, q = string.match(raw, '^(%d+):(%d+):(%d+):(%d+)')
  return tonumber(h), tonumber(w), tonumber(e), tonumber(q)
end
-- Of its turn, kept apart (KEYS[10]): when its answer said its term ends (others waited), that
-- time, and it gives back then on its own; and when another's report handed it the turn and it
-- has not answered for it yet, the budget's version then.
local function turn_of(id)
  local raw = redis.call('HGET', KEYS[10], id)
  if not raw then return 0, 0 end
  local r, g = string.match(raw, '^(%d+):(%d+)$')
  return tonumber(r) or 0, tonumber(g) or 0
end
local function forget(id)
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZREM', KEYS[6], id)
  redis.call('ZREM', KEYS[8], id)
  redis.call('ZREM', KEYS[9], id)
  redis.call('HDEL', KEYS[10], id)
end
-- Another process's entry (held `h`, wanting `w`) goes, and the sums with it.
local function drop(id, h, w)
  reserved, total, n = reserved - h, total - w, n - 1
  forget(id)
end
-- Expired entries go, a few per report; what they reserved is handed on below.
local swept = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 20)) do
  if id ~= me then
    local raw = redis.call('HGET', KEYS[1], id)
    if raw then
      local h, w = parse(raw)
      swept = swept + h
      drop(id, h, w)
    else
      forget(id)
    end
  end
end
local raw = redis.call('HGET', KEYS[1], me)
local before = 0
if raw then
  local h, w, e, q = parse(raw)
  local _, g = turn_of(me)
  if e > now and seq <= q and not behind then
    return {0, 0, 0, 0, math.max(n, 1), epoch, version, math.max(learn - now, 0), 0, e - now}
  end
  if e > now then before = h end
  -- A turn handed to it that this report was sent without knowing (it had not seen the
  -- budget's state it was handed at): kept for it, and this answer tells it.
  local seen_epoch, seen_version = tonumber(ARGV[8]), tonumber(ARGV[9])
  if e > now and g > 0 and not behind and ARGV[7] ~= '1' and (seen_epoch < epoch or seen_version < g) then
    holding = math.max(holding, h)
  end
  reserved, total, n = reserved - h, total - w, n - 1
end
if ARGV[7] == '1' then wants = 0 end
-- The water level: the wants in ascending order (a sorted set), walked only as far as the
-- first want at or above its fair part of what is left; every want below the level is one
-- permit or more, so the walk is never longer than the limit.
if wants > 0 then
  redis.call('ZADD', KEYS[8], wants, me)
else
  redis.call('ZREM', KEYS[8], me)
end
local nw = redis.call('ZCARD', KEYS[8])
local level = limit
-- The first read is short: when every process wants more than its part (turns), the first want
-- ends the walk.
local left, k, size = limit, 0, 4
while k < nw do
  local chunk = redis.call('ZRANGE', KEYS[8], k, k + size - 1, 'WITHSCORES')
  size = 64
  if #chunk == 0 then break end
  local found = false
  for i = 2, #chunk, 2 do
    local w = tonumber(chunk[i])
    local share = left / (nw - k)
    if w >= share then
      level, found = share, true
      break
    end
    left, k = left - w, k + 1
  end
  if found then break end
end
local base = math.min(wants, math.floor(level))
-- What it runs is kept up to what its live entry already reserves (still counted when the
-- entries sum past the limit after learning); beyond that, only what the others leave free.
local mhas = math.min(holding, math.max(limit - reserved, before))
-- What the others leave: past it (entries summing past the limit after a loss of state), what
-- it runs stays counted, but it starts nothing new until they leave room.
local room = math.max(limit - reserved, 0)
if learning or behind then mhas = holding end
local free = math.max(limit - reserved - mhas, 0)
if not learning and mhas < base then
  local grow = math.min(base - mhas, free)
  mhas, free = mhas + grow, free - grow
end
-- When it began to hold what it holds: its term at any permit beyond its base runs from then.
if mhas > 0 then
  redis.call('ZADD', KEYS[5], 'NX', now, me)
else
  redis.call('ZREM', KEYS[5], me)
end
local others_below = redis.call('ZCARD', KEYS[6]) - (redis.call('ZSCORE', KEYS[6], me) and 1 or 0)
local others_waiting = redis.call('ZCARD', KEYS[4]) - (redis.call('ZSCORE', KEYS[4], me) and 1 or 0)
local cap = mhas
local told = {}
-- When to report again to give back what is beyond the base, others waiting (0: no need).
local recheck = 0
if mhas > base then
  local since = tonumber(redis.call('ZSCORE', KEYS[5], me) or now)
  if others_waiting > 0 and now < since + term then recheck = since + term - now end
  if others_below > 0 or (others_waiting > 0 and now >= since + term) then
    -- Others are short: the extras go back as their calls end; drained, this process queues
    -- again at the back (its next term runs from when it takes a permit again).
    cap = base
  end
elseif wants > mhas and not learning and mhas == base then
  -- A turn at a permit beyond the base: the head of the queue takes one when one is free.
  -- Queued by the server's milliseconds with their microseconds (ties are not broken by id),
  -- on the scale processes of earlier versions queue by.
  if not redis.call('ZSCORE', KEYS[4], me) then
    redis.call('ZADD', KEYS[4], string.format('%.3f', now_us / 1000), me)
  end
  local rank = redis.call('ZRANK', KEYS[4], me)
  if free > rank and others_below == 0 then
    -- One permit beyond the base at most: what the bases leave over is fewer permits than
    -- the processes at the level.
    -- Its term at the extra runs from now.
    redis.call('ZADD', KEYS[5], now, me)
    mhas, free, cap = mhas + 1, free - 1, mhas + 1
    redis.call('ZREM', KEYS[4], me)
    if redis.call('ZCARD', KEYS[4]) > 0 then
      recheck = tonumber(redis.call('ZSCORE', KEYS[5], me)) + term - now
    end
  else
    -- Its turn is not yet: the holder of extras whose term ran out first gives them back,
    -- told once, and only if it does not know: one that reported since its term ran out was
    -- answered so (or nobody waited then, and its next renewal is), and one whose answer said
    -- when its term ends gives back then on its own (told all the same a term past that).
    local ran_out = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now - term, 'WITHSCORES', 'LIMIT', 0, 5)
    for i = 1, #ran_out, 2 do
      local id, since = ran_out[i], tonumber(ran_out[i + 1])
      if id ~= me and tonumber(redis.call('ZSCORE', KEYS[9], id) or 0) > math.floor(level) then
        local raw = redis.call('HGET', KEYS[1], id)
        local _, _, e = parse(raw or '0:0:0:0')
        local r, g = turn_of(id)
        -- Not reported since its term began: a turn handed to it it has not answered for, or
        -- its entry's last report (a holder's entry lives one lease) before then.
        if (g > 0 or e - lease < since + term) and (r == 0 or now > r + term) then
          told[#told + 1] = id
          break
        end
      end
    end
  end
else
  redis.call('ZREM', KEYS[4], me)
end
if mhas < base and not learning then
  -- Below its base: those holding more than any base are told to report (and capped).
  redis.call('ZADD', KEYS[6], now, me)
  local over = redis.call('ZRANGEBYSCORE', KEYS[9], '(' .. math.floor(level), '+inf', 'LIMIT', 0, base - mhas)
  for _, id in ipairs(over) do
    if id ~= me then told[#told + 1] = id end
  end
else
  redis.call('ZREM', KEYS[6], me)
end
if wants <= mhas or mhas > base then redis.call('ZREM', KEYS[4], me) end
-- Turns handed over here: {id, held now, entry} (told with what they hold, not to report).
local handed = {}
if (mhas < before or swept > 0) and free > 0 then
  -- Permits went back (or expired with their process's entry): to those below their base
  -- first (told to report and take them), then the turns queue.
  for _, id in ipairs(redis.call('ZRANGE', KEYS[6], 0, free - 1)) do
    if id ~= me then told[#told + 1] = id end
  end
  if redis.call('ZCARD', KEYS[6]) == 0 and not learning then
    -- Nobody is below its base: each head of the queue is handed a permit here, as its own
    -- report would take it, and told what it holds now (it asks nothing). Two heads more are
    -- read, for heads whose process is gone.
    for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, free + 1)) do
      local raw = free > 0 and id ~= me and redis.call('HGET', KEYS[1], id)
      if raw then
        local h, w, e, q = parse(raw)
        if not alive(id) then
          -- Nobody listens on its process's channel: the process is gone, or reconnecting (it
          -- reports once it hears again). No turn is handed to it; one that reserves nothing
          -- and last reported more than a lease ago is dropped now rather than when its entry
          -- expires (a live one renews every two leases, and reports when its channel is back).
          if h == 0 and e < now + wait_life - lease then drop(id, h, w) end
        elseif e > now and w > h and h == math.min(w, math.floor(level)) then
          free, reserved = free - 1, reserved + 1
          redis.call('ZREM', KEYS[4], id)
          redis.call('ZADD', KEYS[5], now, id)
          redis.call('ZADD', KEYS[9], h + 1, id)
          handed[#handed + 1] = {id, h + 1, w, e, q}
        else
          told[#told + 1] = id
        end
      end
    end
  else
    for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, free - 1)) do
      if id ~= me then told[#told + 1] = id end
    end
  end
end
-- A turn handed over ends a term after its holder began to hold, if others still queue.
local queued_after = #handed > 0 and redis.call('ZCARD', KEYS[4]) or 0
for _, g in ipairs(handed) do
  local ends = 0
  if queued_after > 0 then ends = tonumber(redis.call('ZSCORE', KEYS[5], g[1])) + term end
  g[6] = ends
end
local life = 0
if ARGV[7] == '1' and holding == 0 then
  forget(me)
else
  life = lease
  if mhas == 0 and base == 0 and wants > 0 then life = wait_life end
  redis.call('HSET', KEYS[1], me, mhas .. ':' .. wants .. ':' .. (now + life) .. ':' .. seq)
  if recheck > 0 then
    redis.call('HSET', KEYS[10], me, (now + recheck) .. ':0')
  else
    redis.call('HDEL', KEYS[10], me)
  end
  redis.call('ZADD', KEYS[3], now + life, me)
  redis.call('ZADD', KEYS[9], mhas, me)
  reserved, total, n = reserved + mhas, total + wants, n + 1
end
redis.call('HSET', KEYS[7], 'reserved', reserved, 'wants', total, 'n', n)
version = redis.call('HINCRBY', KEYS[2], 'version', 1)
for _, g in ipairs(handed) do
  redis.call('HSET', KEYS[1], g[1], g[2] .. ':' .. g[3] .. ':' .. g[4] .. ':' .. g[5])
  redis.call('HSET', KEYS[10], g[1], g[6] .. ':' .. version)
end
-- Told with the budget's version: a process whose own report ran after this one skips it. A
-- turn handed over says what its holder holds now and the ms to its term's end.
for _, id in ipairs(told) do tell(id .. string.format('@%d.%d', epoch, version)) end
for _, g in ipairs(handed) do
  tell(g[1] .. string.format('@%d.%d+%d.%d', epoch, version, g[2], math.max(g[6] - now, 0)))
end
cap = math.min(cap, room)
return {1, cap, mhas, base, math.max(n, 1), epoch, version, math.max(learn - now, 0), math.max(recheck, 0), life}
