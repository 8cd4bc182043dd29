-- Rescale (rescale.py), for each source task beyond the new partition count, once every
-- target is written: delete it, if this rescale holds it.
-- KEYS: 1 meta, 2 data, 3 undo, 4 log, 5 stage, 6 stage_undo
-- ARGV: 1 the rescale's lock
-- Returns 1 (deleted now), 0 (not held by this rescale: deleted before).
if redis.call('HGET', KEYS[1], 'rescale') ~= ARGV[1] then return 0 end
redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return 1
