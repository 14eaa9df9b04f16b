local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  redis.call('HSET', KEYS[1], 'high_water', ARGV[1], 'seen', ARGV[2], 'layout', ARGV[3])
  return 1
end
if t ~= 'hash' or redis.call('HGET', KEYS[1], 'layout') ~= ARGV[3] then return 0 end
local hw = tonumber(redis.call('HGET', KEYS[1], 'high_water'))
if hw == nil or hw < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'high_water', ARGV[1])
  redis.call('HDEL', KEYS[1], 'last')
end
local seen = tonumber(redis.call('HGET', KEYS[1], 'seen'))
if seen == nil or seen < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'seen', ARGV[2])
end
return 1
