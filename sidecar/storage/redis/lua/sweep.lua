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
local m = redis.call('HMGET', meta, 'time', 'opened_at', 'updated_at', 'ver', 'log_ver',
  'log_n', 'rescale', 'now_ms', 'batch')
if m[1] == 'event' or m[7] then return 0 end  -- event time moves only with the events
local seconds = tonumber(ARGV[3])
for _, t in ipairs({m[2], m[3]}) do
  if t and seconds - tonumber(t) < tonumber(ARGV[2]) then return 0 end
end
local now = tonumber(ARGV[1])
if m[8] and tonumber(m[8]) > now then return 0 end
local gone = take_expired(ttl, data, now)  -- prelude.lua
local CH = 2000
for i = 1, #gone, CH do
  redis.call('HDEL', data, unpack(gone, i, math.min(i + CH - 1, #gone)))
end
local ver = tonumber(m[4] or '0')
local nv = string.format('%d', ver + 1)
if #gone > 0 then
  if m[5] and tonumber(m[5]) == ver then
    -- a change after the last batch, as an operator's edit is (edit.lua)
    local tag = string.format('%d', tonumber(m[9] or '-1') + 1)
    redis.call('HSET', log, nv, cmsgpack.pack(gone), '#' .. nv, #gone, 'b' .. nv, tag)
    redis.call('HSET', meta, 'log_ver', nv, 'log_n',
      string.format('%d', tonumber(m[6] or '0') + #gone))
  end
  redis.call('HSET', meta, 'ver', nv, 'size', string.format('%d', redis.call('HLEN', data)),
    'size_ver', nv, 'now_ms', ARGV[1], 'swept_at', ARGV[3])
end
return #gone
