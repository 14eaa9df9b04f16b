if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  -- Run again after Redis ran it and its reply was lost, a close finds its
  -- own exact last ID recorded: done, not lost.
  if redis.call('TYPE', KEYS[2]).ok == 'hash'
    and redis.call('HGET', KEYS[2], 'last') == ARGV[2] .. ' ' .. ARGV[3] then
    return 1
  end
  return 0
end
local bad = check(KEYS[2], ARGV[5])
if bad then
  redis.call('DEL', KEYS[1])
  return bad
end
if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[2], 'high_water')) then
  redis.call('HSET', KEYS[2], 'high_water', ARGV[2])
end
redis.call('HSET', KEYS[2], 'last', ARGV[2] .. ' ' .. ARGV[3])
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', KEYS[2], 'seen')) then
  redis.call('HSET', KEYS[2], 'seen', ARGV[4])
end
stamp(KEYS[2])
redis.call('DEL', KEYS[1])
return 1
