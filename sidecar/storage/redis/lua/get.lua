-- Get(task, epoch, at, keys): read keys when the epoch is current (remote mode, and the
-- values of a delta restore).
-- KEYS: 1 meta, 2 data. ARGV: 1 epoch, 2 the version counter the state must be at ('':
-- any), then keys. Errors: TSFENCED <epoch>, TSMOVED <counter> (the state is no longer at
-- that version: a delta restore falls back to a full one).
local m = redis.call('HMGET', KEYS[1], 'epoch', 'ver')
if m[1] == false or tonumber(m[1]) ~= tonumber(ARGV[1]) then
  return redis.error_reply('TSFENCED ' .. tostring(m[1]))
end
if ARGV[2] ~= '' and (m[2] or '0') ~= ARGV[2] then
  return redis.error_reply('TSMOVED ' .. tostring(m[2]))
end
if #ARGV < 3 then return {} end
return redis.call('HMGET', KEYS[2], unpack(ARGV, 3))
