local bad = check(KEYS[2], ARGV[4])
if bad then return bad end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(redis.call('HGET', KEYS[2], 'high_water')) < tonumber(ARGV[5]) then return 8 end
if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[2], 'high_water')) then
  redis.call('HSET', KEYS[2], 'high_water', ARGV[2])
end
if tonumber(ARGV[3]) > tonumber(redis.call('HGET', KEYS[2], 'seen')) then
  redis.call('HSET', KEYS[2], 'seen', ARGV[3])
end
if (tonumber(redis.call('HGET', KEYS[2], 'lead')) or 0) < tonumber(ARGV[6]) then
  redis.call('HSET', KEYS[2], 'lead', ARGV[6])
end
redis.call('HDEL', KEYS[2], 'last')
stamp(KEYS[2])
return 1
