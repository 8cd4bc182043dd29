-- Commit(task, epoch, batch, upserts, deletes, position): one atomic change set.
-- KEYS: 1 meta, 2 data, 3 undo, 4 log, 5 ttl (the expiry index: key -> its expiry or an
--       earlier time, kept from the values' envelopes, prelude.lua ttl_sync)
-- ARGV: 1 epoch, 2 batch ('' for batch jobs), 3 position ('+' .. bytes, or '' for none),
--       4 now, 5 writer, 6 the change set's keys (upserted, then deleted) as one msgpack
--       array (the change log's entry), 7 the upserts: a msgpack array [key1, value1, key2,
--       value2, ...] ('' for none), 8 the deleted keys: a msgpack array ('' for none); every
--       item a msgpack str, as the client packed them (the sidecar hands them on as they came)
-- The rollback record (undo) is made by the first commit of a new batch, in one of two
-- modes (meta undo_mode):
--   'copy'   when the batch's first change set touches at least a quarter as many keys as
--            the state holds: undo is a COPY of the data hash as it was (one C-level copy,
--            several times cheaper per key than recording keys one by one); later commits
--            of the batch record nothing; a rollback RENAMEs it back and, when the task
--            had an expiry index before the batch (meta undo_ttl), rebuilds the index from
--            it (open.lua): a copy of the index at every such commit cost more (4 ms per
--            10,000 keys, a third of a ttl block's extra time in Redis) than a rebuild at
--            the rare rollback.
--   'fields' otherwise: undo is a hash of, for every key the batch touched, its value
--            before the batch ('' when it did not exist); later commits of the same batch
--            (group-scoped commits, retries) add only keys not yet recorded, so a retried
--            commit is idempotent.
-- The change log (log): a hash, field <v> = the keys version v changed (a msgpack array,
-- as ARGV 6 brings it), field #<v> = how many and field b<v> = the batch that wrote it
-- (-1 in a batch job). Meta log_floor and log_ver say what it
-- covers: every version in (log_floor, ver] is in it, provided log_ver = ver (a writer
-- that bumps ver without logging, such as an import, leaves log_ver
-- behind, and the next logged commit starts the log afresh). Meta log_n counts its keys;
-- past LOG_MAX(size) the oldest versions go, raising log_floor: a worker whose cached
-- version is below the floor restores in full. Meta log_floor_batch is the batch of the
-- state at log_floor, so the log holds every key changed after that batch (a read of the
-- changes since a batch, reads.py). Logging costs one HSET of one string.
-- A batch in fields mode turns to copy mode when a later change set is as large (the
-- data with the record applied is the state before the batch).
-- Returns field/value pairs: version, size, base_version (the version this change set was
-- applied on).
-- Errors: TSFENCED <epoch>, TSAHEAD <last>, TSCORRUPT <what>.
-- An error writes nothing.
local meta, data, undo, log, ttl = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local foreign = not_hashes({data, undo, log})  -- prelude.lua
if foreign then return foreign end
local m = meta_fields(meta, {'epoch', 'batch', 'undo_batch', 'pos', 'ver', 'gen',
  'undo_mode', 'log_floor', 'log_ver', 'log_n', 'log_floor_batch'})
for _, name in ipairs({'epoch', 'batch', 'undo_batch', 'ver', 'log_floor', 'log_ver',
    'log_n'}) do
  local v = m[name]
  if v and tonumber(v) == nil then
    return redis.error_reply('TSCORRUPT metadata field ' .. name .. ' is not a number')
  end
end
if m.epoch == false or tonumber(m.epoch) ~= tonumber(ARGV[1]) then
  return redis.error_reply('TSFENCED ' .. tostring(m.epoch))
end
local has_batch = ARGV[2] ~= ''
local track = false
local fresh = false
local ups, dels = {}, {}
if ARGV[7] ~= '' then ups = cmsgpack.unpack(ARGV[7]) end
if ARGV[8] ~= '' then dels = cmsgpack.unpack(ARGV[8]) end
local nchanges = #ups / 2 + #dels
local has_ttl = redis.call('EXISTS', ttl) == 1
if has_batch then
  local batch = tonumber(ARGV[2])
  local last = tonumber(m.batch or '-1')
  if batch < last then
    return redis.error_reply('TSAHEAD ' .. string.format('%d', last))
  end
  if batch > last or tonumber(m.undo_batch or '-2') ~= batch then
    -- In a slot being migrated, Redis refuses a script's access to a key that is missing,
    -- even one the script deleted itself. So copy mode uses COPY ... REPLACE rather than
    -- UNLINK + COPY. Fields mode must re-create the record it deleted; if that access is
    -- refused (after the meta update below, before any data write), the state is still
    -- consistent: the record is empty and the data untouched, so a replay rolls back
    -- nothing and the retried commit records the keys afresh once the slot has moved.
    local prev_pos = ''
    if m.pos then prev_pos = '+' .. m.pos end
    local size = redis.call('HLEN', data)
    local mode = 'fields'
    if size <= 4 * nchanges then mode = 'copy' end
    if mode == 'copy' and size > 0 then
      redis.call('COPY', data, undo, 'REPLACE')
    else
      redis.call('UNLINK', undo)  -- freed off the main thread
    end
    -- copy mode does not copy the expiry index: a rollback rebuilds it from the copy's
    -- values (exact entries: a valid index) when one existed (undo_ttl, open.lua)
    redis.call('HSET', meta, 'undo_batch', ARGV[2], 'prev_batch', m.batch or '-1',
      'prev_pos', prev_pos, 'batch', ARGV[2], 'undo_mode', mode, 'undo_n', '0',
      'undo_ttl', (mode == 'copy' and has_ttl) and '1' or '0')
    m.undo_mode = mode
    fresh = true
  end
  if m.undo_mode == 'fields' and not fresh then
    local size = redis.call('HLEN', data)
    if size > 0 and size <= 4 * nchanges then
      -- A large change set late in the batch (a flush of held group changes after a
      -- small first commit): recording its keys one by one would cost more than a copy
      -- of the state as it was before the batch, which is the data with the record
      -- applied. From here on the batch is in copy mode.
      local u = redis.call('HGETALL', undo)
      redis.call('COPY', data, undo, 'REPLACE')
      apply_record(undo, u)  -- prelude.lua
      -- an index before the batch: one now, or a key the batch changed had an expiry
      local had_ttl = has_ttl
      for j = 2, #u, 2 do
        if had_ttl then break end
        if u[j] ~= '' and expiry_of(u[j]) then had_ttl = true end
      end
      redis.call('HSET', meta, 'undo_mode', 'copy', 'undo_n', string.format('%d', #u / 2),
        'undo_ttl', had_ttl and '1' or '0')
      m.undo_mode = 'copy'
    end
  end
  if m.undo_mode == 'copy' then
    redis.call('HINCRBY', meta, 'undo_n', nchanges)
  else
    track = true
  end
end
local CH = 2000
-- the change log keeps at most max(LOG_MIN, state size / LOG_FRACTION) keys
local LOG_MIN, LOG_FRACTION = 4096, 8
-- Record, for the keys ks[1..#ks] not yet in the rollback record, their value before the
-- batch ('' when absent). On the first commit of a batch the record is empty: no lookup.
local function remember(ks)
  local old = redis.call('HMGET', data, unpack(ks))
  local seen = {}
  if not fresh then seen = redis.call('HMGET', undo, unpack(ks)) end
  local rec, n = {}, 0  -- a count kept: `#rec` would search the table at every append
  for j = 1, #ks do
    if fresh or seen[j] == false then
      rec[n + 1] = ks[j]
      rec[n + 2] = old[j] or ''
      n = n + 2
    end
  end
  if n > 0 then redis.call('HSET', undo, unpack(rec, 1, n)) end
end
-- upserts, in chunks (unpack has a stack limit). The expiry index has nothing to learn
-- when there is none and no value can start with an envelope's '~' (none in the blob: a
-- C-level search instead of a Lua loop over every value, 0.7-1 ms per 10,000 keys)
local sync = has_ttl or (ARGV[7] ~= '' and string.find(ARGV[7], '~', 1, true) ~= nil)
local i = 1
while i <= #ups do
  local stop = math.min(i + 2 * CH, #ups + 1) - 1
  if track then
    local ks, n = {}, 0
    for j = i, stop, 2 do
      n = n + 1
      ks[n] = ups[j]
    end
    remember(ks)
  end
  redis.call('HSET', data, unpack(ups, i, stop))
  if sync and ttl_sync(ttl, ups, i, stop, has_ttl) then has_ttl = true end
  i = stop + 1
end
-- deletes
i = 1
while i <= #dels do
  local stop = math.min(i + CH, #dels + 1) - 1
  if track then
    remember({unpack(dels, i, stop)})
  end
  redis.call('HDEL', data, unpack(dels, i, stop))
  if has_ttl then redis.call('ZREM', ttl, unpack(dels, i, stop)) end
  i = stop + 1
end
if ARGV[3] ~= '' then
  redis.call('HSET', meta, 'pos', string.sub(ARGV[3], 2))
end
local base = tonumber(m.ver or '0')
local ver = base + 1
local vs = string.format('%d', ver)
-- the change log: this change set's keys, at this version
local floor = tonumber(m.log_floor or '0')
local logged = tonumber(m.log_n or '0')
local floor_batch = m.log_floor_batch
if m.log_ver == false or tonumber(m.log_ver) ~= base then
  -- versions up to base were written without the log (or it never existed): start afresh
  floor, logged, floor_batch = base, 0, m.batch or '-1'
  redis.call('UNLINK', log)
end
local tag = '-1'
if has_batch then tag = ARGV[2] end
redis.call('HSET', log, vs, ARGV[6], '#' .. vs, nchanges, 'b' .. vs, tag)
logged = logged + nchanges
local size = redis.call('HLEN', data)
local log_max = math.max(LOG_MIN, math.floor(size / LOG_FRACTION))
while logged > log_max and floor < ver do
  -- the oldest version goes; a worker holding a version below the new floor restores in full
  floor = floor + 1
  local old = string.format('%d', floor)
  local gone = redis.call('HMGET', log, '#' .. old, 'b' .. old)
  logged = logged - tonumber(gone[1] or '0')
  floor_batch = gone[2]  -- false for a version logged before versions had batches
  redis.call('HDEL', log, old, '#' .. old, 'b' .. old)
end
redis.call('HSET', meta, 'ver', vs, 'updated_at', ARGV[4], 'last_writer', ARGV[5],
  'size', string.format('%d', size), 'size_ver', vs,
  'log_floor', string.format('%d', floor), 'log_ver', vs, 'log_n', string.format('%d', logged))
if floor_batch then
  redis.call('HSET', meta, 'log_floor_batch', floor_batch)
else
  redis.call('HDEL', meta, 'log_floor_batch')
end
-- a large change set's unpacked keys and values are garbage now: free them (prelude.lua)
ups, dels = nil, nil
free_lua_heap()
return {'version', m.gen .. ':' .. vs, 'size', size,
  'base_version', m.gen .. ':' .. string.format('%d', base)}
