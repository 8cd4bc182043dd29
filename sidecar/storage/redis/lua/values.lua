-- Values(task, epoch, version, keys): the values of keys, if the state is still at a version.
-- KEYS: 1 meta, 2 data
-- ARGV: 1 epoch, 2 the version counter the caller expects, then keys
-- Returns {1, value|false, ...}, or {0} when the state moved past that version (a delta
-- restore then falls back to a full one). Errors: TSFENCED <epoch>. Reads only.
local m = redis.call('HMGET', KEYS[1], 'epoch', 'ver')
if m[1] == false or tonumber(m[1]) ~= tonumber(ARGV[1]) then
  return redis.error_reply('TSFENCED ' .. tostring(m[1]))
end
if (m[2] or '0') ~= ARGV[2] then return {0} end
local out = {1}
if #ARGV < 3 then return out end
for _, v in ipairs(redis.call('HMGET', KEYS[2], unpack(ARGV, 3))) do out[#out + 1] = v end
return out
