local function run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') or ''
end
local function stamp(key)
  local run = run_id()
  if redis.call('HGET', key, 'run') ~= run then redis.call('HSET', key, 'run', run) end
end
