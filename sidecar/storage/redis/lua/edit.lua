-- Edit(task, key, value): an operator's change to one key of a task's stored state
-- (`taskstate set`, `del`, `erase`), outside any task attempt.
-- KEYS: 1 meta, 2 data, 3 undo, 4 log, 5 edits, 6 ttl (the expiry index)
-- ARGV: 1 key, 2 encoded value ('' : delete), 3 codec of the value, 4 now
-- Applied at once (a new version, in the change log, so workers holding an older copy
-- get it as a delta) and kept in `edits` (key -> value, '' : delete) with meta
-- 'edit_batch' = the task's last written batch: open.lua applies the kept edits again at
-- the first Open of a later batch (or of a batch job), then forgets them. So neither a
-- replay of the batch in flight (its rollback record predates the edit) nor that
-- batch's own later commits undo an edit past the next batch. A delete also removes the
-- key's value from the rollback record, so that no copy of an erased value is left.
-- Returns 1 if the key existed, 0 if not.
-- Errors: TSNOTASK (no such task), TSRESCALING <lock>, TSCODEC <stored codec>.
local meta, data, undo, log, edits, ttl = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local foreign = not_hashes({data, undo, log, edits})  -- prelude.lua
if foreign then return foreign end
if redis.call('EXISTS', meta) == 0 then return redis.error_reply('TSNOTASK') end
local m = meta_fields(meta, {'rescale', 'ver', 'log_ver', 'log_n', 'batch', 'undo_mode',
  'codec', 'edit_batch'})
if m.rescale then return redis.error_reply('TSRESCALING ' .. m.rescale) end
if m.codec and m.codec ~= ARGV[3] then return redis.error_reply('TSCODEC ' .. m.codec) end
local key, value = ARGV[1], ARGV[2]
local had = redis.call('HEXISTS', data, key)
if value == '' then
  redis.call('HDEL', data, key)
  if m.undo_mode == 'copy' then
    redis.call('HDEL', undo, key)
  elseif redis.call('HEXISTS', undo, key) == 1 then
    redis.call('HSET', undo, key, '')  -- rolled back: absent
  end
else
  redis.call('HSET', data, key, value)
end
ttl_sync(ttl, {key, value}, 1, 2, true)  -- prelude.lua: a value with an expiry, or none
local ver = tonumber(m.ver or '0')
local nv = string.format('%d', ver + 1)
if m.log_ver and tonumber(m.log_ver) == ver then
  -- logged as a change of the batch after the last written one: the job sees it from then
  local tag = string.format('%d', tonumber(m.batch or '-1') + 1)
  redis.call('HSET', log, nv, cmsgpack.pack({key}), '#' .. nv, 1, 'b' .. nv, tag)
  redis.call('HSET', meta, 'log_ver', nv,
    'log_n', string.format('%d', tonumber(m.log_n or '0') + 1))
end
if not m.edit_batch then redis.call('DEL', edits) end  -- left by a task since replaced (import)
redis.call('HSET', edits, key, value)
redis.call('HSET', meta, 'ver', nv, 'edit_batch', m.batch or '-1', 'edited_at', ARGV[4],
  'updated_at', ARGV[4], 'size', string.format('%d', redis.call('HLEN', data)), 'size_ver', nv)
return had
