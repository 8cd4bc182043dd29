-- ReadKeys(task, keys): some keys of a task's committed state, without a claim, in one
-- step (the data source's `key = ...` and `key IN (...)` filters).
-- KEYS: 1 meta, 2 data
-- ARGV: 1 the version counter the state must be at ('': any; later pages of one read),
--       then the keys
-- Returns {version, committed batch, value1 | false, value2 | false, ...}.
-- Errors: TSNOTASK (no such task), TSRESCALING <lock> (a rescale or a write holds it),
-- TSMOVED <counter> (the state moved on since an earlier page). Reads only.
local m = meta_fields(KEYS[1], {'gen', 'ver', 'batch', 'rescale'})
if m.rescale then return redis.error_reply('TSRESCALING ' .. m.rescale) end
if not m.gen then return redis.error_reply('TSNOTASK') end
local ver = m.ver or '0'
if ARGV[1] ~= '' and ver ~= ARGV[1] then return redis.error_reply('TSMOVED ' .. ver) end
local out = {m.gen .. ':' .. ver, m.batch or '-1'}
local CH = 2000
for i = 2, #ARGV, CH do
  local vals = redis.call('HMGET', KEYS[2], unpack(ARGV, i, math.min(i + CH - 1, #ARGV)))
  for j = 1, #vals do out[#out + 1] = vals[j] end
end
return out
