-- Seed (seed.py): a page of keys that Spark task `source` (attempt `attempt`) of a data
-- source write stages for this task, in that source's own hash. A later attempt of the
-- same source starts its hash afresh (the earlier attempt failed or was abandoned); an
-- earlier one is fenced (a zombie). Nothing staged is visible until seed_publish.lua.
-- KEYS: 1 meta, 2 the source's staging hash (seed:<id>:<source>), 3 seed:<id>:att
-- ARGV: 1 the write's lock, 2 source, 3 attempt, then key/value pairs
-- Returns the number of keys staged.
-- Errors: TSRESCALING <lock> (another write or a rescale holds the task), TSGONE (the
-- write no longer holds it: finished, aborted or undone), TSFENCED <attempt> (a later
-- attempt of this source staged already), TSDUPLICATE <key> (this attempt staged the key
-- before: the DataFrame has it twice).
local meta, stage, att = KEYS[1], KEYS[2], KEYS[3]
local held = redis.call('HGET', meta, 'rescale')
if held ~= ARGV[1] then
  if held then return redis.error_reply('TSRESCALING ' .. held) end
  return redis.error_reply('TSGONE')
end
local attempt = tonumber(ARGV[3])
local before = tonumber(redis.call('HGET', att, ARGV[2]) or '')
if before and before > attempt then
  return redis.error_reply('TSFENCED ' .. string.format('%d', before))
end
if before ~= attempt then
  redis.call('UNLINK', stage)
  redis.call('HSET', att, ARGV[2], ARGV[3])
end
for i = 4, #ARGV, 2 do
  if redis.call('HSETNX', stage, ARGV[i], ARGV[i + 1]) == 0 then
    return redis.error_reply('TSDUPLICATE ' .. ARGV[i])
  end
end
return (#ARGV - 3) / 2
