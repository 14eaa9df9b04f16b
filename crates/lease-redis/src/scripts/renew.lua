local bad = check(KEYS[2], ARGV[4])
local t = redis.call('TIME')
if bad then return {bad, false, t[1], t[2]} end
local hw = redis.call('HGET', KEYS[2], 'high_water')
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if tonumber(hw) >= tonumber(ARGV[3]) then stamp(KEYS[2]) end
  return {1, hw, t[1], t[2]}
end
if v then return {0, hw, t[1], t[2]} end
if hw ~= ARGV[3] then return {0, hw, t[1], t[2]} end
if redis.call('HGET', KEYS[2], 'run') ~= run_id() then return {9, hw, t[1], t[2]} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HDEL', KEYS[2], 'last')
return {2, hw, t[1], t[2]}
