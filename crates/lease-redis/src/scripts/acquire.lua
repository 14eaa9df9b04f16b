local prefix = ARGV[1]
local skip = {}
for i = 6, #ARGV do skip[ARGV[i]] = true end
for s = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  if not skip[tostring(s)] then
    if redis.call('SET', prefix .. ':lease:' .. s, ARGV[4], 'NX', 'PX', ARGV[5]) then
      local key = prefix .. ':mark:' .. s
      local t = redis.call('TYPE', key).ok
      local now = redis.call('TIME')
      if t ~= 'hash' then return {s, t, false, false, false, false, now[1], now[2], 0} end
      local m = redis.call('HMGET', key, 'high_water', 'last', 'seen', 'layout', 'run')
      local current = 0
      if m[5] == run_id() then current = 1 end
      return {s, t, m[1], m[2], m[3], m[4], now[1], now[2], current}
    end
  end
end
return false
