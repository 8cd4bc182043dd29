-- ReadKeys(task, epoch, at, keys): some keys of a task's state, in one atomic step.
-- A task attempt's (its epoch: remote mode, on-demand reads, a delta restore's values) or
-- claim-free (epoch ''): the data source's `key = ...` and `key IN (...)` filters.
-- KEYS: 1 meta, 2 data
-- ARGV: 1 the reading attempt's epoch ('': claim-free), 2 the version counter the state
--       must be at ('': any; a later page of one read), then the keys
-- Returns field/value pairs: version, batch (the committed one), values (value1 | false,
-- value2 | false, ...: the keys' in order).
-- Errors: TSFENCED <epoch> (another attempt holds the claim), TSNOTASK and TSRESCALING
-- <lock> (claim-free: no such task; a rescale or a write holds it), TSMOVED <counter>
-- (the state moved on since an earlier page). Reads only.
local m = meta_fields(KEYS[1], {'epoch', 'gen', 'ver', 'batch', 'rescale'})
if ARGV[1] ~= '' then
  if m.epoch == false or tonumber(m.epoch) ~= tonumber(ARGV[1]) then
    return redis.error_reply('TSFENCED ' .. tostring(m.epoch))
  end
else
  if m.rescale then return redis.error_reply('TSRESCALING ' .. m.rescale) end
  if not m.gen then return redis.error_reply('TSNOTASK') end
end
local ver = m.ver or '0'
if ARGV[2] ~= '' and ver ~= ARGV[2] then return redis.error_reply('TSMOVED ' .. ver) end
local values = {}
local CH = 2000
for i = 3, #ARGV, CH do
  local vals = redis.call('HMGET', KEYS[2], unpack(ARGV, i, math.min(i + CH - 1, #ARGV)))
  for j = 1, #vals do values[#values + 1] = vals[j] end
end
return {'version', (m.gen or '') .. ':' .. ver, 'batch', m.batch or '-1', 'values', values}
