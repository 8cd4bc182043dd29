-- Seed (seed.py), once every Spark task of the write has staged: merge, for one task, the
-- hashes of the sources' attempts that count (Spark's commit messages) into `stage`, and
-- drop the others' (failed attempts). A key in two sources' hashes is a duplicate. The
-- largest hash is renamed into `stage` rather than copied, when `stage` is empty.
-- KEYS: 1 meta, 2 seed:<id>:stage, 3 seed:<id>:att, then the staging hash of each source in
--       ARGV order
-- ARGV: 1 the write's lock, then source/attempt pairs (attempt -1: drop its hash)
-- Returns the number of keys merged by this call.
-- Errors: TSRESCALING <lock>, TSGONE, TSDUPLICATE <key>. On TSDUPLICATE the write is
-- undone by the caller (seed_undo.lua): what was merged is never visible.
local meta, stage, att = KEYS[1], KEYS[2], KEYS[3]
local held = redis.call('HGET', meta, 'rescale')
if held ~= ARGV[1] then
  if held then return redis.error_reply('TSRESCALING ' .. held) end
  return redis.error_reply('TSGONE')
end
local keep = {}
local largest, size = nil, -1
for i = 2, #ARGV, 2 do
  local src = KEYS[3 + i / 2]
  local staged = redis.call('HGET', att, ARGV[i])
  if staged and staged == ARGV[i + 1] then
    keep[#keep + 1] = src
    local n = redis.call('HLEN', src)
    if n > size then largest, size = src, n end
  else
    redis.call('UNLINK', src)
  end
end
local merged = 0
if largest and redis.call('EXISTS', stage) == 0 then
  redis.call('RENAME', largest, stage)
  merged = size
end
local CH = 2000
for _, src in ipairs(keep) do
  if src ~= largest or merged == 0 then
    local kv = redis.call('HGETALL', src)
    for j = 1, #kv, 2 do
      if redis.call('HSETNX', stage, kv[j], kv[j + 1]) == 0 then
        return redis.error_reply('TSDUPLICATE ' .. kv[j])
      end
    end
    merged = merged + #kv / 2
    redis.call('UNLINK', src)
  end
end
-- forgotten only now: after a duplicate, seed_undo.lua finds every source's hash by them
for i = 2, #ARGV, 2 do redis.call('HDEL', att, ARGV[i]) end
return merged
