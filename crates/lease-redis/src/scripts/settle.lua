if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, false, false, false} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local t = redis.call('TYPE', KEYS[2]).ok
local lead = tonumber(ARGV[5])
if t == 'hash' then
  local recorded = tonumber(redis.call('HGET', KEYS[2], 'lead'))
  if recorded and recorded > lead then lead = recorded end
end
local now = redis.call('TIME')
local floor = math.max(tonumber(now[1]) + lead + tonumber(ARGV[7]), tonumber(ARGV[3]))
floor = tostring(math.min(floor, tonumber(ARGV[6])))
if t == 'none' then
  redis.call('HSET', KEYS[2], 'high_water', floor, 'seen', ARGV[3], 'layout', ARGV[4], 'lead', tostring(lead))
  stamp(KEYS[2])
  return {1, floor, ARGV[3], ARGV[4]}
end
local bad = check(KEYS[2], ARGV[4])
if bad then return {bad, false, false, false} end
if tonumber(redis.call('HGET', KEYS[2], 'high_water')) < tonumber(floor) then
  redis.call('HSET', KEYS[2], 'high_water', floor)
end
redis.call('HSET', KEYS[2], 'lead', tostring(lead))
redis.call('HDEL', KEYS[2], 'last')
stamp(KEYS[2])
local m = redis.call('HMGET', KEYS[2], 'high_water', 'seen', 'layout')
return {2, m[1], m[2], m[3]}
