local removed = 0
for i = 5, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZREM', KEYS[3], ARGV[i])
  end
end
promote()
return {epoch, version, learn_left(), removed}
