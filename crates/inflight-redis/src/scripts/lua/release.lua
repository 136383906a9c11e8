local removed = 0
for i = 5, #ARGV do
  removed = removed + give_back(ARGV[i])
end
promote()
return {epoch, version, learn_left(), removed}
