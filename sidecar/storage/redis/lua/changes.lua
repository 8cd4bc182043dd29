-- Changes(task, epoch, since): which keys changed since a version (delta restore).
-- KEYS: 1 meta, 2 log
-- ARGV: 1 epoch, 2 the version the caller holds (the counter after 'gen:'), 3 its
--       generation, 4 the most keys worth a delta
-- The log (see commit.lua) covers versions (log_floor, ver] when log_ver = ver.
-- Returns field/value pairs: version, total, and logged: one msgpack array of keys per
-- version after the caller's (a key may appear in several); total -1 (no logged) when
-- the log does not cover the caller's version (another generation, trimmed past it, not
-- kept) or more than ARGV 4 keys changed: restore in full. Errors: TSFENCED <epoch>. Reads only.
local meta, log = KEYS[1], KEYS[2]
local m = meta_fields(meta, {'epoch', 'gen', 'ver', 'log_floor', 'log_ver'})
if m.epoch == false or tonumber(m.epoch) ~= tonumber(ARGV[1]) then
  return redis.error_reply('TSFENCED ' .. tostring(m.epoch))
end
local ver = m.ver or '0'
local token = (m.gen or '') .. ':' .. ver
local since, now = tonumber(ARGV[2]), tonumber(ver)
if m.gen ~= ARGV[3] or m.log_ver ~= ver or since == nil or now == nil
    or since < tonumber(m.log_floor or '0') or since > now then
  return {'version', token, 'total', -1}
end
if since == now then return {'version', token, 'total', 0, 'logged', {}} end
local counts, fields = {}, {}
for v = since + 1, now do
  counts[#counts + 1] = '#' .. string.format('%d', v)
  fields[#fields + 1] = string.format('%d', v)
end
local total = 0
local CH = 2000
for i = 1, #counts, CH do
  for _, c in ipairs(redis.call('HMGET', log, unpack(counts, i, math.min(i + CH - 1, #counts)))) do
    total = total + tonumber(c or '0')
  end
end
if total > tonumber(ARGV[4]) then return {'version', token, 'total', -1} end
local logged = {}
for i = 1, #fields, CH do
  for _, b in ipairs(redis.call('HMGET', log, unpack(fields, i, math.min(i + CH - 1, #fields)))) do
    if b then logged[#logged + 1] = b end
  end
end
return {'version', token, 'total', total, 'logged', logged}
