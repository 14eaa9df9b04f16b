local function digits(v)
  return v and #v > 0 and #v <= 16 and not string.find(v, '[^0-9]')
end
local function check(key, layout)
  local t = redis.call('TYPE', key).ok
  if t == 'none' then return 3 end
  if t ~= 'hash' then return 4 end
  local m = redis.call('HMGET', key, 'high_water', 'seen', 'last', 'layout')
  if not digits(m[1]) then return 4 end
  if not digits(m[2]) then return 5 end
  if m[3] and (#m[3] > 32 or not string.match(m[3], '^[0-9]+ [0-9]+$')) then return 6 end
  if m[4] ~= layout then return 7 end
  return false
end
