-- Open(task, batch): claim the task for a new attempt.
-- KEYS: 1 meta, 2 data, 3 undo (all in the task's hash-tag slot)
-- ARGV: 1 batch ('' for batch jobs), 2 generation id for a new task, 3 now,
--       4 writer, 5 codec
-- Returns {epoch, committed_batch, position|false, has_position, size, version,
--          rolled_back, rolled_back_keys}
-- Errors: TSAHEAD <last>, TSCORRUPT <what>, TSCODEC <stored codec>. An error writes nothing.
local meta, data, undo = KEYS[1], KEYS[2], KEYS[3]
-- a data or rollback key of another type would fail a write half-way: refuse first
for _, k in ipairs({data, undo}) do
  local t = redis.call('TYPE', k)['ok']
  if t ~= 'hash' and t ~= 'none' then
    return redis.error_reply('TSCORRUPT key ' .. k .. ' holds a ' .. t .. ', not a hash')
  end
end
local m = redis.call('HMGET', meta, 'layout', 'epoch', 'batch', 'gen', 'ver', 'codec',
  'undo_batch', 'prev_batch', 'prev_pos', 'pos', 'undo_mode', 'undo_n')
if m[1] and m[1] ~= '1' then
  return redis.error_reply('TSCORRUPT layout version ' .. tostring(m[1]) .. ' is not 1')
end
if m[6] and m[6] ~= ARGV[5] then
  return redis.error_reply('TSCODEC ' .. m[6])
end
local last = tonumber(m[3] or '-1')
local epoch = tonumber(m[2] or '0')
local ver = tonumber(m[5] or '0')
if last == nil or epoch == nil or ver == nil then
  return redis.error_reply('TSCORRUPT metadata field batch, epoch or ver is not a number')
end
local has_batch = ARGV[1] ~= ''
local batch = tonumber(ARGV[1])
if has_batch and last > batch then
  return redis.error_reply('TSAHEAD ' .. string.format('%d', last))
end
epoch = epoch + 1
local gen = m[4] or ARGV[2]
local pos = m[10]
local rolled, nrolled = 0, 0
if has_batch and last == batch and last >= 0 then
  if tonumber(m[7] or '-2') ~= batch then
    -- only the last written batch can be rolled back, and that record was used already:
    -- the checkpoint is older than the state
    return redis.error_reply('TSNOUNDO ' .. string.format('%d', last))
  end
  if m[11] == 'copy' then
    -- undo is the data as it was before the batch (absent: there was none)
    if redis.call('EXISTS', undo) == 1 then
      -- RENAME replaces data in one step: deleting it first would make it a missing key
      -- that this script touches again, which Redis refuses in a slot being migrated
      redis.call('RENAME', undo, data)
    else
      redis.call('UNLINK', data)
    end
    nrolled = tonumber(m[12] or '0')
  else
    local u = redis.call('HGETALL', undo)
    for i = 1, #u, 2 do
      if u[i + 1] == '' then
        redis.call('HDEL', data, u[i])
      else
        redis.call('HSET', data, u[i], u[i + 1])
      end
    end
    nrolled = #u / 2
    redis.call('DEL', undo)
  end
  local prev = m[8] or '-1'
  redis.call('HSET', meta, 'batch', prev)
  last = tonumber(prev)
  pos = m[9]
  if pos and string.sub(pos, 1, 1) == '+' then
    pos = string.sub(pos, 2)
    redis.call('HSET', meta, 'pos', pos)
  else
    pos = nil
    redis.call('HDEL', meta, 'pos')
  end
  redis.call('HDEL', meta, 'undo_batch', 'prev_batch', 'prev_pos', 'undo_mode', 'undo_n')
  redis.call('HINCRBY', meta, 'rollbacks', 1)
  ver = ver + 1
  rolled = 1
end
redis.call('HSET', meta, 'layout', '1', 'epoch', string.format('%d', epoch), 'gen', gen,
  'ver', string.format('%d', ver), 'codec', ARGV[5], 'opened_at', ARGV[3],
  'last_writer', ARGV[4])
if not m[3] then
  redis.call('HSET', meta, 'batch', '-1')
end
local has_pos = 0
if pos then has_pos = 1 else pos = false end
return {epoch, last, pos, has_pos, redis.call('HLEN', data),
  gen .. ':' .. string.format('%d', ver), rolled, nrolled}
