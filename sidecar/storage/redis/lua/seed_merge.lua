-- Seed (seed.py), once every Spark task of the write has staged: merge, for one task, the
-- hashes of the attempts that count (Spark's commit messages) into `stage`, and drop the
-- others' (attempts that failed, or were abandoned, and ran again). A key in two of the
-- merged hashes is a duplicate. The largest hash is renamed into `stage` rather than
-- copied, when `stage` is empty.
-- KEYS: 1 meta, 2 seed:<id>:stage, 3 seed:<id>:att, then attempts' staging hashes
-- ARGV: 1 the write's lock, then for each staging hash in KEYS order '1' (merge) | '0' (drop)
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
for i = 2, #ARGV do
  local src = KEYS[2 + i]
  if ARGV[i] == '1' then
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
  redis.call('PERSIST', stage)
  merged = size
end
local CH = 2000
for _, src in ipairs(keep) do
  if src ~= largest or merged == 0 then
    local kv = redis.call('HGETALL', src)
    for i = 1, #kv, 2 * CH do
      local stop = math.min(i + 2 * CH, #kv + 1) - 1
      local ks = {}
      for j = i, stop, 2 do ks[#ks + 1] = kv[j] end
      local had = redis.call('HMGET', stage, unpack(ks))
      for j = 1, #had do
        if had[j] then return redis.error_reply('TSDUPLICATE ' .. ks[j]) end
      end
      redis.call('HSET', stage, unpack(kv, i, stop))
    end
    merged = merged + #kv / 2
    redis.call('UNLINK', src)
  end
end
-- forgotten only now: after a duplicate, seed_undo.lua finds every attempt's hash by them
for i = 3 + 1, #KEYS do
  redis.call('SREM', att, string.match(KEYS[i], ':([^:]+)$'))
end
return merged
