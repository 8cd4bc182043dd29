-- Seed (seed.py): undo a data source write for one task (aborted, refused, or abandoned):
-- drop what it staged and release the task; a placeholder the write created goes whole.
-- The task's state was never touched (the epoch stays raised: an attempt from before the
-- write is fenced, as after a rescale's lock).
-- KEYS: 1 meta, 2 seed:<id>:stage, 3 seed:<id>:att, then every attempt's staging hash
-- ARGV: 1 the write's lock
-- Returns 1 (released now), 0 (not held by this write).
local meta = KEYS[1]
redis.call('UNLINK', unpack(KEYS, 2))
if redis.call('HGET', meta, 'rescale') ~= ARGV[1] then return 0 end
if redis.call('HGET', meta, 'seed_new') then
  redis.call('DEL', meta)
else
  redis.call('HDEL', meta, 'rescale', 'rescale_at')
end
return 1
