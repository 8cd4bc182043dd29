-- Shared by every script (scripts.py puts it first).

-- meta_fields(key, names): HMGET of a metadata hash as a table keyed by field name (false
-- for a field that is not set, as HMGET answers). Scripts read `m.epoch`, never `m[2]`.
local function meta_fields(key, names)
  local values = redis.call('HMGET', key, unpack(names))
  local t = {}
  for i = 1, #names do t[names[i]] = values[i] end
  return t
end

-- reply_field(reply, name): the value of `name` in a reply of field/value pairs (the form
-- open.lua and commit.lua answer in; replies.py's `fields` reads them on the other side).
local function reply_field(reply, name)
  for i = 1, #reply, 2 do
    if reply[i] == name then return reply[i + 1] end
  end
  return nil
end
-- not_hashes(keys): the error reply for the first key that exists and is not a hash, or
-- nil. A data, rollback or log key of another type would fail a write half-way: the
-- scripts that write refuse first.
local function not_hashes(keys)
  for _, k in ipairs(keys) do
    local t = redis.call('TYPE', k)['ok']
    if t ~= 'hash' and t ~= 'none' then
      return redis.error_reply('TSCORRUPT key ' .. k .. ' holds a ' .. t .. ', not a hash')
    end
  end
  return nil
end

-- apply_record(hash, rec): apply a fields-mode rollback record (its HGETALL reply: key,
-- value before the batch, ...; '' when the key did not exist) to a hash; returns its keys.
local function apply_record(hash, rec)
  local ks = {}
  for i = 1, #rec, 2 do
    if rec[i + 1] == '' then
      redis.call('HDEL', hash, rec[i])
    else
      redis.call('HSET', hash, rec[i], rec[i + 1])
    end
    ks[#ks + 1] = rec[i]
  end
  return ks
end

-- expiry_of(v): the expiry (epoch ms) of a stored value written with a time to live, or
-- nil. An envelope is `~<expiry>:<version>~<JSON>` (taskstate/proto/envelope.py); JSON
-- never starts with `~` (byte 126). The values of one block share their head (`~<expiry>:`,
-- one clock reading and one ttl): the last head parsed is kept, and a value that starts
-- with it costs one plain find, not a pattern match and a new string (10,000 values:
-- about 2.6 ms of Lua against 4.7).
local last_head, last_expiry, last_digits = nil, nil, nil
local function expiry_of(v)
  if string.byte(v, 1) ~= 126 then return nil end
  if last_head and string.find(v, last_head, 1, true) == 1 then return last_expiry end
  local head = string.match(v, '^~%d+:')
  if not head then return nil end
  last_head, last_digits = head, string.sub(head, 2, -2)
  last_expiry = tonumber(last_digits)
  return last_expiry
end

-- expiry_digits(v): `expiry_of(v)` as the envelope writes it, a string of digits: a
-- ZADD score given as a string goes to Redis as it is, where a Lua number would first be
-- formatted by redis.call (about 0.3 us each: 3 ms of a 10,000-key commit).
local function expiry_digits(v)
  if expiry_of(v) then return last_digits end
  return nil
end

-- ttl_sync(ttl, kv, i, stop, known): keep a task's expiry index true for the key/value
-- pairs kv[i..stop] just written ('' as a value: the key is gone). The index is a sorted
-- set of key -> a time at or before the key's expiry: keys with an expiry join it at
-- their expiry or keep an earlier entry (ZADD LT), the others leave it (`known`: the
-- index exists, so there may be something to remove). Returns whether it added any.
-- Why a bound and not the expiry itself: a key rewritten before it expires (most keys of
-- a running job, every batch) would otherwise move in the sorted set at every write
-- (ZADD of 10,000 members that all move: 4.6 ms of a 10,000-key commit; with LT an
-- entry that stays costs a lookup). The claim at which an early entry comes due reads
-- the value, keeps the key and moves the entry to the value's expiry (take_expired):
-- one move per key and time to live instead of one per write, and no key stays stored
-- past its expiry for want of an entry.
local function ttl_sync(ttl, kv, i, stop, known)
  local add, rem, na, nr = {}, {}, 0, 0  -- counts kept: `#t` searches the table each time
  local byte, find = string.byte, string.find
  for j = i, stop, 2 do
    local v = kv[j + 1]
    local e = nil
    if v ~= '' and byte(v, 1) == 126 then
      -- expiry_digits inlined for the common case, a value of the last head parsed
      if last_head and find(v, last_head, 1, true) == 1 then
        e = last_digits
      else
        e = expiry_digits(v)
      end
    end
    if e then
      add[na + 1] = e
      add[na + 2] = kv[j]
      na = na + 2
    elseif known then
      nr = nr + 1
      rem[nr] = kv[j]
    end
  end
  if na > 0 then redis.call('ZADD', ttl, 'LT', unpack(add, 1, na)) end
  if nr > 0 then redis.call('ZREM', ttl, unpack(rem, 1, nr)) end
  return na > 0
end

-- rebuild_index(ttl, data): the expiry index made anew from every value of `data` (after
-- a copy-mode rollback, which restores the data but keeps no copy of the index; a
-- rescale's target), a page of HSCAN at a time so that the Lua heap holds a page, not the
-- task. `ttl` must not exist yet (nothing is removed from it).
local function rebuild_index(ttl, data)
  local cursor = '0'
  repeat
    local page = redis.call('HSCAN', data, cursor, 'COUNT', 1000)
    cursor = page[1]
    ttl_sync(ttl, page[2], 1, #page[2], false)
  until cursor == '0'
end

-- free_lua_heap(): a full collection of Redis' Lua heap when it holds more than
-- LUA_HEAP_KB, at the end of a script that may have made that much garbage (a large change
-- set unpacked into Lua strings). Lua collects incrementally, paced by later allocations
-- and by Redis' GC step every 50 scripts: left to it, the garbage of one large commit (a
-- 400,000-key change set leaves about 60 MB, and a string table sized for it) is paid for
-- by whichever scripts run next, of every task on this server, each a few milliseconds
-- slower until the cycle ends. Collected here, the large change set pays for its own
-- garbage (a fraction of what it took to apply it); the heap is about 1 MB otherwise,
-- and a commit of up to about 50,000 keys stays under the limit (no collection).
local LUA_HEAP_KB = 8192
local function free_lua_heap()
  if collectgarbage('count') > LUA_HEAP_KB then collectgarbage('collect') end
end

-- take_expired(ttl, data, now): the keys whose value expires at or before `now`, and a
-- flat list of them with their values (key, value, ...), taken out of the expiry index;
-- an entry due before its value's expiry (the key was written again since: ttl_sync) is
-- moved to that expiry, and an entry of a value without one leaves. Deletes nothing from
-- data.
local function take_expired(ttl, data, now)
  local gone, old, ng, no = {}, {}, 0, 0  -- counts kept, not `#t` at every append
  local due = redis.call('ZRANGEBYSCORE', ttl, '-inf', now)
  for i = 1, #due, 2000 do
    local ks = {unpack(due, i, math.min(i + 1999, #due))}
    local vs = redis.call('HMGET', data, unpack(ks))
    local fix, nf = {}, 0
    for j = 1, #ks do
      local e = vs[j] and expiry_of(vs[j])
      if e and e <= now then
        ng = ng + 1
        gone[ng] = ks[j]
        old[no + 1] = ks[j]
        old[no + 2] = vs[j]
        no = no + 2
      elseif e then
        fix[nf + 1] = last_digits  -- expiry_of(vs[j])'s digits
        fix[nf + 2] = ks[j]
        nf = nf + 2
      end
    end
    redis.call('ZREM', ttl, unpack(ks))
    if nf > 0 then redis.call('ZADD', ttl, unpack(fix, 1, nf)) end
  end
  return gone, old
end

-- STASH_FIELDS: the meta fields that describe a finished batch kept aside (open.lua's
-- stash); open.lua and done.lua drop them with the stash.
local STASH_FIELDS = {'stash_batch', 'stash_gen', 'stash_pos', 'stash_ttl', 'stash_by',
  'stash_size'}
