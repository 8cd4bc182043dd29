-- Get(task, epoch, keys): read keys when the epoch is current (remote mode).
-- KEYS: 1 meta, 2 data. ARGV: 1 epoch, then keys. Errors: TSFENCED <epoch>.
local e = redis.call('HGET', KEYS[1], 'epoch')
if e == false or tonumber(e) ~= tonumber(ARGV[1]) then
  return redis.error_reply('TSFENCED ' .. tostring(e))
end
if #ARGV < 2 then return {} end
return redis.call('HMGET', KEYS[2], unpack(ARGV, 2))
