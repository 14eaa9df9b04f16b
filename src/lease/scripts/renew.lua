local bad = check(KEYS[2], ARGV[4])
if bad then return bad end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then return 0 end
if redis.call('HGET', KEYS[2], 'high_water') ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HDEL', KEYS[2], 'last')
return 2
