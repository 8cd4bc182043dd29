-- ReadChanges(task, since_batch): the keys changed after a committed batch, with their
-- values now, without a claim, in one step (the data source's changesSinceBatch).
-- KEYS: 1 meta, 2 data, 3 log
-- ARGV: 1 the batch
-- The change log (commit.lua) holds every version after log_floor when log_ver = ver, each
-- with the batch that wrote it (b<v>); the state at log_floor was at log_floor_batch. So
-- it answers for any batch >= log_floor_batch (-1 when the log starts at the beginning).
-- A replayed batch's first run counts too: a key it changed and the rollback restored is
-- named, with its value now.
-- Returns field/value pairs: version, batch (the committed one), covered (the oldest
-- batch the log answers for), and when it answers for ARGV 1, pairs: key1, value1 | ''
-- (deleted), key2, ...
-- Errors: TSNOTASK, TSRESCALING <lock>. Reads only.
local meta, data, log = KEYS[1], KEYS[2], KEYS[3]
local m = meta_fields(meta, {'gen', 'ver', 'batch', 'rescale', 'log_floor', 'log_ver',
  'log_floor_batch'})
if m.rescale then return redis.error_reply('TSRESCALING ' .. m.rescale) end
if not m.gen then return redis.error_reply('TSNOTASK') end
local ver = tonumber(m.ver or '0')
local batch = tonumber(m.batch or '-1')
local token = m.gen .. ':' .. string.format('%d', ver)
local since = tonumber(ARGV[1])
local floor = tonumber(m.log_floor or '0')
local covered = batch  -- without a usable log: only "nothing changed after the last batch"
if m.log_ver and tonumber(m.log_ver) == ver then
  if floor == 0 then
    covered = -1
  elseif m.log_floor_batch then
    covered = tonumber(m.log_floor_batch)
  end
end
if since < covered then
  return {'version', token, 'batch', string.format('%d', batch),
    'covered', string.format('%d', covered)}
end
local pairs_out = {}
local CH = 2000
local tags, fields = {}, {}
for v = floor + 1, ver do tags[#tags + 1] = 'b' .. string.format('%d', v) end
local wanted = {}
for i = 1, #tags, CH do
  local bs = redis.call('HMGET', log, unpack(tags, i, math.min(i + CH - 1, #tags)))
  for j = 1, #bs do
    local b = tonumber(bs[j] or '')
    -- a version whose batch is not in the log is counted as changed: the safe answer
    if b == nil or b > since then wanted[#wanted + 1] = string.sub(tags[i + j - 1], 2) end
  end
end
local seen, keys = {}, {}
for i = 1, #wanted, CH do
  for _, blob in ipairs(redis.call('HMGET', log, unpack(wanted, i, math.min(i + CH - 1, #wanted)))) do
    if blob then
      for _, k in ipairs(cmsgpack.unpack(blob)) do
        if not seen[k] then
          seen[k] = true
          keys[#keys + 1] = k
        end
      end
    end
  end
end
for i = 1, #keys, CH do
  local stop = math.min(i + CH - 1, #keys)
  local vals = redis.call('HMGET', data, unpack(keys, i, stop))
  for j = 1, #vals do
    pairs_out[#pairs_out + 1] = keys[i + j - 1]
    pairs_out[#pairs_out + 1] = vals[j] or ''
  end
end
return {'version', token, 'batch', string.format('%d', batch), 'covered',
  string.format('%d', covered), 'pairs', pairs_out}
