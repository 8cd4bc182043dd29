-- Rescale (rescale.py), for each target task, in one step: the data and rollback record
-- staged for it (stage, stage_undo: every source's keys that Spark now sends here)
-- replace what it held, and its metadata starts a new generation at the component's
-- committed batch, with the new partition count, a higher epoch (zombies stay fenced)
-- and a change log that starts afresh (workers holding an older copy restore in full).
-- KEYS: 1 meta, 2 data, 3 undo, 4 log, 5 stage, 6 stage_undo, 7 edits (dropped: the
--       data holds every edit already), 8 ttl (the expiry index, made anew from the
--       values the target takes)
-- ARGV: 1 the rescale's lock, 2 partition count, 3 committed batch, 4 the batch before
--       it ('': no rollback record, a replay of the batch is refused), 5 generation,
--       6 now, 7 codec
-- Returns field/value pairs: written (1 now, 0 before by this rescale), keys.
-- Errors: TSRESCALING <lock> (another rescale holds it).
local meta, data, undo, log, stage, stage_undo =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local m = meta_fields(meta, {'rescaled_by', 'epoch', 'rescale'})
if m.rescaled_by == ARGV[1] then return {'written', 0, 'keys', redis.call('HLEN', data)} end
if m.rescale and m.rescale ~= ARGV[1] then return redis.error_reply('TSRESCALING ' .. m.rescale) end
local epoch = (tonumber(m.epoch or '0') or 0) + 1
if redis.call('EXISTS', stage) == 1 then
  redis.call('RENAME', stage, data)
else
  redis.call('UNLINK', data)
end
if ARGV[4] ~= '' and redis.call('EXISTS', stage_undo) == 1 then
  redis.call('RENAME', stage_undo, undo)
else
  redis.call('UNLINK', undo, stage_undo)
end
redis.call('UNLINK', log, KEYS[7], KEYS[8])
-- the expiry index of the keys this target takes (their envelopes carry it)
rebuild_index(KEYS[8], data)  -- prelude.lua
redis.call('DEL', meta)
local size = redis.call('HLEN', data)
redis.call('HSET', meta, 'layout', '1', 'epoch', string.format('%d', epoch), 'gen', ARGV[5],
  'ver', '1', 'codec', ARGV[7], 'batch', ARGV[3], 'partitions', ARGV[2],
  'rescaled_by', ARGV[1], 'rescaled_at', ARGV[6], 'updated_at', ARGV[6],
  'last_writer', 'taskstate rescale', 'size', string.format('%d', size), 'size_ver', '1',
  'log_floor', '1', 'log_ver', '1', 'log_n', '0', 'log_floor_batch', ARGV[3])
if ARGV[4] ~= '' then
  -- a replay of the committed batch rolls back exactly what that batch changed
  redis.call('HSET', meta, 'undo_batch', ARGV[3], 'prev_batch', ARGV[4], 'undo_mode', 'fields',
    'undo_n', string.format('%d', redis.call('HLEN', undo)))
end
return {'written', 1, 'keys', size}
