-- Open(task, batch, attempt): claim the task for a task attempt.
-- KEYS: 1 meta, 2 data, 3 undo, 4 log, 5 edits, 6 ttl (the expiry index), 7 stash (all in
--       the task's hash-tag slot)
-- ARGV: 1 batch ('' for batch jobs), 2 generation id for a new task, 3 now,
--       4 writer, 5 codec, 6 attempt id ('': no Spark task, always a new claim),
--       7 '1': refuse a task with no keys at all (TSNEW) so the sidecar can ask the index,
--       8, 9: the generation and version counter this sidecar last saw ('' '': none),
--       10: the partition count the task declares ('' none), 11: its partition id,
--       12: the block's event time in epoch ms ('': processing time), 13: the sidecar's
--       clock in epoch ms
-- The claim belongs to the task attempt, not to a process: meta 'claim' and
-- 'claim_batch' name the attempt that owns the current epoch. The same attempt opening
-- at the same batch again (Spark served it with a second Python worker) reuses the
-- claim: same epoch, nothing rolled back. Another attempt claims as before (epoch + 1,
-- rollback of a replayed batch), and the attempt it displaced is added to 'superseded'
-- (the last SUPERSEDED_MAX, space-separated): that zombie's later Open is fenced instead
-- of rolling back the attempt that replaced it. So is the first Open of an attempt of the
-- same application (SCOPE:N, N Spark's task attempt id) launched before the claim's one
-- (a smaller N) at the same batch: an older attempt that opens late. An attempt of the
-- same application that rolls back a batch another attempt finished (meta done_batch,
-- done_by: done.lua, the executor plugin's flush) first keeps the finished state aside
-- (stash): Spark counts the first attempt that reports success and may kill the late one
-- half-way. The first claim of a later batch makes the stash the state again, unless an
-- attempt finished the batch since (done.lua dropped it).
-- A rollback is a new version in the change log (commit.lua): in fields mode the keys
-- it restored are logged at that version; in copy mode (the batch touched a large share
-- of the state) the log starts afresh, so workers holding older versions restore in full.
-- Returns field/value pairs (replies.py `fields` reads them by name): epoch, batch (the
-- committed one), position (false: none), has_position, size, version, rolled_back,
-- rolled_back_keys, reused_claim, now_ms, expired.
-- Lost state (Redis evicted, flushed or failed over): meta 'size' is the data's size
-- after the write of version 'size_ver', so metadata whose data is gone (when size_ver
-- is the current version: only then does 'size' describe the data), or data without its
-- metadata, is refused (TSLOST) instead of opening as a fresh start. A task with neither is new,
-- unless the sidecar must first ask the namespace's index (ARGV 7 = '1': TSNEW, nothing
-- written; the sidecar asks, then opens again with ARGV 7 = '0'). A version below the
-- one this sidecar saw, in the same generation, is refused too (TSLOST behind): Redis
-- lost commits it had acknowledged (a failover to a replica that missed them).
-- Partition count (meta 'partitions', recorded at the first Open that declares one): an
-- Open that declares another count, or a partition id outside it, is refused (TSPARTS
-- <recorded>); so is any Open while `taskstate rescale` holds the task (meta 'rescale':
-- TSRESCALING <id>). A task with no keys gets both checks from the sidecar (TSNEW).
-- Operators' edits (edit.lua) kept in `edits` are applied again by the first claim at a
-- batch after meta 'edit_batch' (any claim, in a batch job), as a version of their own
-- in the change log, and then forgotten.
-- Expiry (keys written with a time to live, keeping the index `ttl`): a batch's "now" is
-- fixed at its first claim (meta now_batch, now_ms: the block's event time, or the
-- sidecar's clock) and kept for any later claim of the same batch, a replay included; the
-- first claim of a batch deletes the keys whose expiry is at or before it, as a write of
-- that batch (its rollback record holds them: a replay rolls them back and expires them
-- again) and a version in the change log. So every key a block of the batch can see is
-- alive. A component that used event time (meta time) refuses a claim without one (TSTIME).
-- Errors: TSAHEAD <last>, TSPARTS <recorded>, TSRESCALING <id>,
-- TSCORRUPT <what>, TSTIME, TSCODEC <stored codec>, TSFENCED <epoch>,
-- TSLOST data <batch> <size> | TSLOST meta <keys> | TSLOST behind <batch> <ver> |
-- TSLOST stash <batch> <size>, TSNEW.
-- An error writes nothing.
local SUPERSEDED_MAX = 32
local meta, data, undo, log, edits, ttl, stash =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local foreign = not_hashes({data, undo, log, edits, stash})  -- prelude.lua
if foreign then return foreign end
local m = meta_fields(meta, {'layout', 'epoch', 'batch', 'gen', 'ver', 'codec',
  'undo_batch', 'prev_batch', 'prev_pos', 'pos', 'undo_mode', 'undo_n', 'claim',
  'claim_batch', 'superseded', 'log_ver', 'log_n', 'size', 'size_ver', 'partitions',
  'rescale', 'edit_batch', 'now_batch', 'now_ms', 'time', 'undo_ttl', 'done_by',
  'done_batch', 'stash_batch', 'stash_gen', 'stash_pos', 'stash_ttl', 'stash_size'})
local has_data = redis.call('EXISTS', data) == 1
if redis.call('EXISTS', meta) == 0 then
  if has_data then
    return redis.error_reply('TSLOST meta ' .. string.format('%d', redis.call('HLEN', data)))
  end
  if ARGV[7] == '1' then return redis.error_reply('TSNEW') end
elseif not has_data and (tonumber(m.size) or 0) > 0 and m.size_ver == (m.ver or '0') then
  return redis.error_reply('TSLOST data ' .. tostring(m.batch or '-1') .. ' ' .. m.size)
end
if m.layout and m.layout ~= '1' then
  return redis.error_reply('TSCORRUPT layout version ' .. tostring(m.layout) .. ' is not 1')
end
if m.codec and m.codec ~= ARGV[5] then
  return redis.error_reply('TSCODEC ' .. m.codec)
end
if m.rescale then return redis.error_reply('TSRESCALING ' .. m.rescale) end
local event = ARGV[12] ~= ''
if m.time == 'event' and not event then return redis.error_reply('TSTIME') end
local recorded = tonumber(m.partitions or '')
if recorded and ((ARGV[10] ~= '' and tonumber(ARGV[10]) ~= recorded)
    or tonumber(ARGV[11]) >= recorded) then
  return redis.error_reply('TSPARTS ' .. m.partitions)
end
local last = tonumber(m.batch or '-1')
local epoch = tonumber(m.epoch or '0')
local ver = tonumber(m.ver or '0')
if last == nil or epoch == nil or ver == nil then
  return redis.error_reply('TSCORRUPT metadata field batch, epoch or ver is not a number')
end
if ARGV[8] ~= '' and m.gen == ARGV[8] and tonumber(ARGV[9]) > ver then
  -- this sidecar saw a later version of this generation: Redis lost the latest commits
  return redis.error_reply('TSLOST behind ' .. tostring(m.batch or '-1') .. ' ' ..
    string.format('%d', ver))
end
local has_batch = ARGV[1] ~= ''
local batch = tonumber(ARGV[1])
if has_batch and last > batch then
  return redis.error_reply('TSAHEAD ' .. string.format('%d', last))
end
local attempt = ARGV[6]
local gen = m.gen or ARGV[2]
if attempt ~= '' and m.claim == attempt and m.claim_batch == ARGV[1] then
  -- the attempt that holds the claim, from another process: share it
  local pos, has_pos = m.pos, 1
  if not pos then pos, has_pos = false, 0 end
  return {'epoch', epoch, 'batch', last, 'position', pos, 'has_position', has_pos,
    'size', redis.call('HLEN', data), 'version', gen .. ':' .. string.format('%d', ver),
    'rolled_back', 0, 'rolled_back_keys', 0, 'reused_claim', 1,
    'now_ms', m.now_ms or ARGV[13], 'expired', 0}
end
local superseded = m.superseded or ''
if attempt ~= '' and string.find(' ' .. superseded .. ' ', ' ' .. attempt .. ' ', 1, true) then
  return redis.error_reply('TSFENCED ' .. string.format('%d', epoch))
end
local scope, id = string.match(attempt, '^(.*):(%d+)$')
local cscope, cid = string.match(m.claim or '', '^(.*):(%d+)$')
if has_batch and m.claim_batch == ARGV[1] and scope and scope == cscope
    and tonumber(id) < tonumber(cid) then
  -- an attempt Spark launched before the one that claimed this batch (same application:
  -- task attempt ids grow with each launch) that opens only now: a zombie of a failed
  -- stage attempt or a slow original beside a speculative copy
  return redis.error_reply('TSFENCED ' .. string.format('%d', epoch))
end
if m.claim and m.claim ~= attempt then
  local kept = {}
  for a in string.gmatch(superseded, '%S+') do kept[#kept + 1] = a end
  kept[#kept + 1] = m.claim
  superseded = table.concat(kept, ' ', math.max(1, #kept - SUPERSEDED_MAX + 1))
end
epoch = epoch + 1
local stash_b = tonumber(m.stash_batch or '')
if stash_b and has_batch and batch > stash_b then
  -- The first claim of a later batch finds a stash (see below): the late attempt that
  -- rolled a finished batch back never finished it (Spark killed it when the stage
  -- ended, having counted the other attempt). The finished batch is the state again.
  local has_stash = redis.call('EXISTS', stash) == 1
  if m.stash_gen == m.gen and not has_stash and (tonumber(m.stash_size or '0') or 0) > 0 then
    -- the copy of a finished batch with keys is gone (Redis lost it): nothing written
    return redis.error_reply('TSLOST stash ' .. m.stash_batch .. ' ' .. m.stash_size)
  end
  if m.stash_gen == m.gen then  -- same generation: no rescale, import or seed came between
    if has_stash then
      redis.call('RENAME', stash, data)
    else
      redis.call('UNLINK', data)
    end
    redis.call('UNLINK', ttl, undo)
    if m.stash_ttl == '1' then rebuild_index(ttl, data) end  -- prelude.lua
    ver = ver + 1
    local nv = string.format('%d', ver)
    redis.call('UNLINK', log)  -- the log starts afresh: workers restore in full
    redis.call('HSET', meta, 'batch', m.stash_batch, 'log_floor', nv, 'log_ver', nv, 'log_n', '0',
      'log_floor_batch', m.stash_batch)
    redis.call('HDEL', meta, 'undo_batch', 'prev_batch', 'prev_pos', 'undo_mode', 'undo_n',
      'undo_ttl')
    redis.call('HINCRBY', meta, 'finished_restored', 1)
    last = stash_b
    m.pos = nil
    if m.stash_pos and string.sub(m.stash_pos, 1, 1) == '+' then
      m.pos = string.sub(m.stash_pos, 2)
    end
    if m.pos then redis.call('HSET', meta, 'pos', m.pos) else redis.call('HDEL', meta, 'pos') end
  else
    redis.call('UNLINK', stash)
  end
  redis.call('HDEL', meta, unpack(STASH_FIELDS))  -- prelude.lua
  stash_b = nil
end
local pos = m.pos
local rolled, nrolled = 0, 0
if has_batch and last == batch and last >= 0 then
  if tonumber(m.undo_batch or '-2') ~= batch then
    -- only the last written batch can be rolled back, and that record was used already:
    -- the checkpoint is older than the state
    return redis.error_reply('TSNOUNDO ' .. string.format('%d', last))
  end
  local dscope = string.match(m.done_by or '', '^(.*):%d+$')
  if m.done_batch == ARGV[1] and m.done_by ~= attempt and scope and scope == dscope
      and not stash_b then
    -- Another attempt of this application finished this batch (done.lua: the plugin's
    -- flush), and this one replays it: a zombie of a failed stage attempt, a speculative
    -- copy, or a map task Spark runs again because its output was lost. Spark may
    -- already count the finished attempt and kill this one half-way when the stage
    -- ends; then no one replays the batch. The finished state is kept aside until this
    -- batch is finished again (done.lua drops it) or a later batch begins (above).
    redis.call('UNLINK', stash)
    if redis.call('EXISTS', data) == 1 then redis.call('COPY', data, stash) end
    local spos = ''
    if m.pos then spos = '+' .. m.pos end
    redis.call('HSET', meta, 'stash_batch', ARGV[1], 'stash_gen', gen, 'stash_pos', spos,
      'stash_ttl', redis.call('EXISTS', ttl) == 1 and '1' or '0', 'stash_by', m.done_by,
      'stash_size', string.format('%d', redis.call('HLEN', data)))
  end
  -- the log goes on only if it covered every version so far (log_ver = ver)
  local logged = m.log_ver and tonumber(m.log_ver) == ver
  local newver = ver + 1
  if m.undo_mode == 'copy' then
    -- undo is the data as it was before the batch (absent: there was none)
    if redis.call('EXISTS', undo) == 1 then
      -- RENAME replaces data in one step: deleting it first would make it a missing key
      -- that this script touches again, which Redis refuses in a slot being migrated
      redis.call('RENAME', undo, data)
    else
      redis.call('UNLINK', data)
    end
    redis.call('UNLINK', ttl)
    if m.undo_ttl == '1' then rebuild_index(ttl, data) end  -- prelude.lua
    nrolled = tonumber(m.undo_n or '0')
    logged = false
  else
    local u = redis.call('HGETALL', undo)
    local undone = apply_record(data, u)  -- prelude.lua
    ttl_sync(ttl, u, 1, #u, true)  -- prelude.lua: the restored keys' expiries
    nrolled = #u / 2
    if logged then
      local nv = string.format('%d', newver)
      redis.call('HSET', log, nv, cmsgpack.pack(undone), '#' .. nv, #undone, 'b' .. nv, ARGV[1])
      redis.call('HSET', meta, 'log_n',
        string.format('%d', tonumber(m.log_n or '0') + #undone))
    end
    redis.call('DEL', undo)
  end
  local prev = m.prev_batch or '-1'
  redis.call('HSET', meta, 'batch', prev)
  last = tonumber(prev)
  pos = m.prev_pos
  if pos and string.sub(pos, 1, 1) == '+' then
    pos = string.sub(pos, 2)
    redis.call('HSET', meta, 'pos', pos)
  else
    pos = nil
    redis.call('HDEL', meta, 'pos')
  end
  redis.call('HDEL', meta, 'undo_batch', 'prev_batch', 'prev_pos', 'undo_mode', 'undo_n',
    'undo_ttl', 'done_batch', 'done_by')
  redis.call('HINCRBY', meta, 'rollbacks', 1)
  if logged then
    redis.call('HSET', meta, 'log_ver', string.format('%d', newver))
  else
    redis.call('UNLINK', log)
    redis.call('HSET', meta, 'log_floor', string.format('%d', newver),
      'log_ver', string.format('%d', newver), 'log_n', '0', 'log_floor_batch', m.prev_batch or '-1')
  end
  ver = newver
  rolled = 1
end
if not m.gen then redis.call('UNLINK', log) end  -- a new generation: no old log applies
local edit_batch = m.edit_batch  -- a rollback leaves it as it was
if edit_batch and (not has_batch or batch > tonumber(edit_batch)) then
  local e = redis.call('HGETALL', edits)
  local ks = apply_record(data, e)  -- prelude.lua: '' deletes
  ttl_sync(ttl, e, 1, #e, true)
  local newver = ver + 1
  local nv = string.format('%d', newver)
  local lv = meta_fields(meta, {'log_ver', 'log_n'})
  if #ks > 0 and tonumber(lv.log_ver or '-1') == ver then
    local tag = ARGV[1]
    if not has_batch then tag = '-1' end
    redis.call('HSET', log, nv, cmsgpack.pack(ks), '#' .. nv, #ks, 'b' .. nv, tag)
    redis.call('HSET', meta, 'log_ver', nv, 'log_n',
      string.format('%d', tonumber(lv.log_n or '0') + #ks))
  end
  if #ks > 0 then ver = newver end
  redis.call('DEL', edits)
  redis.call('HDEL', meta, 'edit_batch')
end
-- expiry: the batch's now, and the keys it finds expired
local now_b = tonumber(ARGV[13])
if event then now_b = tonumber(ARGV[12]) end
if has_batch and m.now_batch == ARGV[1] and m.now_ms then now_b = tonumber(m.now_ms) end
local expired = 0
if redis.call('EXISTS', ttl) == 1 then
  local gone, old = take_expired(ttl, data, now_b)  -- prelude.lua
  local CH = 2000
  if #gone > 0 then
    if has_batch then
      -- a write of this batch: its rollback record (a fresh one: a replay rolled back the
      -- last one above) holds the expired keys, so a replay of the batch restores them
      local cur = meta_fields(meta, {'batch', 'undo_batch'})
      if tonumber(cur.batch or '-1') ~= batch or cur.undo_batch ~= ARGV[1] then
        local prev_pos = ''
        if pos then prev_pos = '+' .. pos end
        redis.call('UNLINK', undo)
        redis.call('HSET', meta, 'undo_batch', ARGV[1], 'prev_batch', cur.batch or '-1',
          'prev_pos', prev_pos, 'batch', ARGV[1], 'undo_mode', 'fields', 'undo_n', '0')
      end
      for i = 1, #old, 2 * CH do
        redis.call('HSET', undo, unpack(old, i, math.min(i + 2 * CH - 1, #old)))
      end
    end
    for i = 1, #gone, CH do
      redis.call('HDEL', data, unpack(gone, i, math.min(i + CH - 1, #gone)))
    end
    local newver = ver + 1
    local nv = string.format('%d', newver)
    local lv = meta_fields(meta, {'log_ver', 'log_n'})
    if tonumber(lv.log_ver or '-1') == ver then
      local tag = ARGV[1]
      if not has_batch then tag = '-1' end
      redis.call('HSET', log, nv, cmsgpack.pack(gone), '#' .. nv, #gone, 'b' .. nv, tag)
      redis.call('HSET', meta, 'log_ver', nv, 'log_n',
        string.format('%d', tonumber(lv.log_n or '0') + #gone))
    end
    ver = newver
    expired = #gone
  end
end
if has_batch then
  redis.call('HSET', meta, 'now_batch', ARGV[1], 'now_ms', string.format('%d', now_b))
end
if event then redis.call('HSET', meta, 'time', 'event') end
local size = redis.call('HLEN', data)
redis.call('HSET', meta, 'layout', '1', 'epoch', string.format('%d', epoch), 'gen', gen,
  'ver', string.format('%d', ver), 'codec', ARGV[5], 'opened_at', ARGV[3],
  'last_writer', ARGV[4], 'size', string.format('%d', size),
  'size_ver', string.format('%d', ver))
if attempt ~= '' then
  redis.call('HSET', meta, 'claim', attempt, 'claim_batch', ARGV[1])
else
  redis.call('HDEL', meta, 'claim', 'claim_batch')  -- an unnamed claim: nobody shares it
end
if superseded ~= '' then redis.call('HSET', meta, 'superseded', superseded) end
if not recorded and ARGV[10] ~= '' then redis.call('HSET', meta, 'partitions', ARGV[10]) end
if not m.batch then
  redis.call('HSET', meta, 'batch', '-1')
end
local has_pos = 0
if pos then has_pos = 1 else pos = false end
return {'epoch', epoch, 'batch', last, 'position', pos, 'has_position', has_pos,
  'size', size, 'version', gen .. ':' .. string.format('%d', ver), 'rolled_back', rolled,
  'rolled_back_keys', nrolled, 'reused_claim', 0, 'now_ms', string.format('%d', now_b),
  'expired', expired}
