-- Shared by every script (scripts.py puts it first).
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
