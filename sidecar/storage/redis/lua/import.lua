-- Import(task, entries): create a task from exported state (`taskstate import`), or add
-- entries to one being imported.
-- KEYS: 1 meta, 2 data, 3 undo, 4 log, 5 ttl (the expiry index, kept from the values),
--       6 stash (a finished batch kept aside, open.lua: dropped with the task it belonged to)
-- ARGV: 1 mode ('create' | 'replace' | 'append'), 2 epoch (append), 3 committed batch,
--       4 position ('+' .. bytes, or '' for none), 5 codec, 6 generation id, 7 now,
--       8 the partition count to record ('' none; the sidecar checked it against the
--       component's), then key/value pairs
-- A created task has no rollback record: a replay of its committed batch is refused by
-- Open (TSNOUNDO) rather than counted twice. Its epoch is one above any earlier claim,
-- so an attempt still holding the old task is fenced off; `append` requests must carry
-- that epoch, so an import racing a running job fails instead of mixing states.
-- An import writes no change log: a created task is a new generation (every cached
-- copy restores in full), and an appended piece bumps ver without log_ver, so the next
-- commit starts the log afresh (commit.lua).
-- A task that a rescale (or a write of the data source) holds (meta 'rescale') is
-- refused in every mode: a replace would delete the lock with the metadata.
-- Returns field/value pairs: epoch, size. Errors: TSEXISTS, TSFENCED <epoch>, TSRESCALING <lock>. An
-- error writes nothing.
local meta, data, undo, log, ttl, stash = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mode = ARGV[1]
local lock = redis.call('HGET', meta, 'rescale')
if lock then
  return redis.error_reply('TSRESCALING ' .. lock)
end
local epoch
if mode == 'append' then
  local e = redis.call('HGET', meta, 'epoch')
  if e == false or tonumber(e) ~= tonumber(ARGV[2]) then
    return redis.error_reply('TSFENCED ' .. tostring(e))
  end
  epoch = tonumber(e)
  redis.call('HINCRBY', meta, 'ver', 1)
else
  local exists = redis.call('EXISTS', meta, data)
  if mode ~= 'replace' and exists > 0 then
    return redis.error_reply('TSEXISTS')
  end
  epoch = (tonumber(redis.call('HGET', meta, 'epoch') or '0') or 0) + 1
  redis.call('UNLINK', data, undo, meta, log, ttl, stash)
  redis.call('HSET', meta, 'layout', '1', 'epoch', string.format('%d', epoch),
    'batch', ARGV[3], 'gen', ARGV[6], 'ver', '1', 'codec', ARGV[5], 'updated_at', ARGV[7],
    'last_writer', 'taskstate import')
  if ARGV[4] ~= '' then
    redis.call('HSET', meta, 'pos', string.sub(ARGV[4], 2))
  end
  if ARGV[8] ~= '' then
    redis.call('HSET', meta, 'partitions', ARGV[8])
  end
end
local CH = 2000
local i = 9
while i <= #ARGV do
  local stop = math.min(i + 2 * CH, #ARGV + 1) - 1
  redis.call('HSET', data, unpack(ARGV, i, stop))
  ttl_sync(ttl, ARGV, i, stop, true)
  i = stop + 1
end
local size = redis.call('HLEN', data)
redis.call('HSET', meta, 'size', string.format('%d', size),  -- open.lua: data lost?
  'size_ver', redis.call('HGET', meta, 'ver') or '1')
return {'epoch', epoch, 'size', size}
