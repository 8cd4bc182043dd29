-- Get(task, epoch, at, keys): read keys when the epoch is current (remote mode, and the
-- values of a delta restore).
-- KEYS: 1 meta, 2 data. ARGV: 1 epoch, 2 the version counter the state must be at ('':
-- any), then keys. Errors: TSFENCED <epoch>, TSMOVED <counter> (the state is no longer at
-- that version: a delta restore falls back to a full one).
local m = meta_fields(KEYS[1], {'epoch', 'ver'})
if m.epoch == false or tonumber(m.epoch) ~= tonumber(ARGV[1]) then
  return redis.error_reply('TSFENCED ' .. tostring(m.epoch))
end
if ARGV[2] ~= '' and (m.ver or '0') ~= ARGV[2] then
  return redis.error_reply('TSMOVED ' .. tostring(m.ver))
end
if #ARGV < 3 then return {} end
return redis.call('HMGET', KEYS[2], unpack(ARGV, 3))
