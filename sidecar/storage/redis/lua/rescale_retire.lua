-- Rescale (rescale.py), for each source task beyond the new partition count, once every
-- target is written: delete it, if this rescale holds it.
-- KEYS: every key of the task, meta first (keys.every_key)
-- ARGV: 1 the rescale's lock
-- Returns 1 (deleted now), 0 (not held by this rescale: deleted before).
if redis.call('HGET', KEYS[1], 'rescale') ~= ARGV[1] then return 0 end
redis.call('UNLINK', unpack(KEYS))
return 1
