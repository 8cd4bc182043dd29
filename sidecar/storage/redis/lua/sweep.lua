-- Sweep(task): delete the keys of an idle task whose time to live has run out in
-- processing time (the sidecar's clock), for tasks whose query no longer opens them (a
-- running query's first claim of each batch expires them itself, open.lua). The task's
-- last batch takes the sweep's time as its now: a replay of that batch (its checkpoint
-- restarted) then finds these keys expired too, instead of seeing keys already gone. A
-- version in the change log, so cached copies learn of the deletions as a delta.
-- KEYS: 1 meta, 2 data, 3 log, 4 ttl
-- ARGV: 1 now (epoch ms), 2 idle (seconds: a task opened or written more recently is left
--       to its query), 3 now in seconds (the form of opened_at and updated_at)
-- Returns the number of keys deleted (0: none due, an event-time component, or in use).
local meta, data, log, ttl = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local m = meta_fields(meta, {'time', 'opened_at', 'updated_at', 'ver', 'log_ver', 'log_n',
  'rescale', 'now_ms', 'batch'})
if m.time == 'event' or m.rescale then return 0 end  -- event time moves only with the events
local seconds = tonumber(ARGV[3])
for _, t in ipairs({m.opened_at, m.updated_at}) do
  if t and seconds - tonumber(t) < tonumber(ARGV[2]) then return 0 end
end
local now = tonumber(ARGV[1])
if m.now_ms and tonumber(m.now_ms) > now then return 0 end
local gone = take_expired(ttl, data, now)  -- prelude.lua
local CH = 2000
for i = 1, #gone, CH do
  redis.call('HDEL', data, unpack(gone, i, math.min(i + CH - 1, #gone)))
end
local ver = tonumber(m.ver or '0')
local nv = string.format('%d', ver + 1)
if #gone > 0 then
  if m.log_ver and tonumber(m.log_ver) == ver then
    -- a change after the last batch, as an operator's edit is (edit.lua)
    local tag = string.format('%d', tonumber(m.batch or '-1') + 1)
    redis.call('HSET', log, nv, cmsgpack.pack(gone), '#' .. nv, #gone, 'b' .. nv, tag)
    redis.call('HSET', meta, 'log_ver', nv, 'log_n',
      string.format('%d', tonumber(m.log_n or '0') + #gone))
  end
  redis.call('HSET', meta, 'ver', nv, 'size', string.format('%d', redis.call('HLEN', data)),
    'size_ver', nv, 'now_ms', ARGV[1], 'swept_at', ARGV[3])
end
return #gone
