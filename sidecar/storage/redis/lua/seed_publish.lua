-- Seed (seed.py), for each task of the component once every merge succeeded: make the
-- written keys the task's state in one step. Overwrite (or a task the write created):
-- `stage` replaces the data. Append: `stage`'s keys are set in the data (written keys
-- replace theirs). Either way the metadata starts a new generation at the write's batch
-- with the partition count, a higher epoch (an attempt from before is fenced), a change
-- log that starts afresh and no rollback record (a replay of that batch is refused).
-- KEYS: 1 meta, 2 data, 3 undo, 4 log, 5 seed:<id>:stage, 6 edits, 7 ttl (the expiry
--       index: written keys have none, so they leave it), 8 stash (a finished batch kept
--       aside, open.lua: it belonged to the generation this write ends)
-- ARGV: 1 the write's lock, 2 partition count, 3 batch, 4 generation, 5 now, 6 codec,
--       7 'overwrite' | 'append'
-- Returns field/value pairs: written (1 now, 0 before by this write), keys.
-- Errors: TSRESCALING <lock>, TSGONE.
local meta, data, undo, log, stage, edits = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local m = meta_fields(meta, {'seeded_by', 'epoch', 'rescale', 'seed_new', 'pos'})
if m.seeded_by == ARGV[1] then return {'written', 0, 'keys', redis.call('HLEN', data)} end
if m.rescale ~= ARGV[1] then
  if m.rescale then return redis.error_reply('TSRESCALING ' .. m.rescale) end
  return redis.error_reply('TSGONE')
end
local epoch = (tonumber(m.epoch or '0') or 0) + 1
if ARGV[7] == 'overwrite' or m.seed_new then
  if redis.call('EXISTS', stage) == 1 then
    redis.call('RENAME', stage, data)
  else
    redis.call('UNLINK', data)
  end
  redis.call('UNLINK', KEYS[7])
elseif redis.call('EXISTS', stage) == 1 then
  local CH = 2000
  local kv = redis.call('HGETALL', stage)
  for i = 1, #kv, 2 * CH do
    local stop = math.min(i + 2 * CH - 1, #kv)
    redis.call('HSET', data, unpack(kv, i, stop))
    ttl_sync(KEYS[7], kv, i, stop, true)
  end
  redis.call('UNLINK', stage)
end
redis.call('UNLINK', KEYS[8])
redis.call('UNLINK', undo, log, edits)
redis.call('DEL', meta)
local size = redis.call('HLEN', data)
redis.call('HSET', meta, 'layout', '1', 'epoch', string.format('%d', epoch), 'gen', ARGV[4],
  'ver', '1', 'codec', ARGV[6], 'batch', ARGV[3], 'partitions', ARGV[2],
  'seeded_by', ARGV[1], 'seeded_at', ARGV[5], 'updated_at', ARGV[5],
  'last_writer', 'taskstate data source', 'size', string.format('%d', size), 'size_ver', '1',
  'log_floor', '1', 'log_ver', '1', 'log_n', '0', 'log_floor_batch', ARGV[3])
if ARGV[7] ~= 'overwrite' and m.pos then redis.call('HSET', meta, 'pos', m.pos) end
return {'written', 1, 'keys', size}
