-- Seed (seed.py), for each task a data source write touches: hold it. A task with state
-- is held as a rescale holds it (the epoch goes up, the claim is cleared, Open refuses it
-- with TSRESCALING); a task without is created as a placeholder that only holds the lock
-- (meta 'seed_new'), so that its Opens are refused too. The undo removes the placeholder.
-- KEYS: 1 meta
-- ARGV: 1 the write's lock ("seed-<id>:<count>"), 2 now
-- Returns 1 (held now, or already by this write).
-- Errors: TSRESCALING <lock> (a rescale or another write holds it).
local meta = KEYS[1]
local held = redis.call('HGET', meta, 'rescale')
if held and held ~= ARGV[1] then
  return redis.error_reply('TSRESCALING ' .. held)
end
if held then return 1 end
if redis.call('EXISTS', meta) == 0 then
  redis.call('HSET', meta, 'rescale', ARGV[1], 'rescale_at', ARGV[2], 'seed_new', '1')
else
  redis.call('HINCRBY', meta, 'epoch', 1)
  redis.call('HSET', meta, 'rescale', ARGV[1], 'rescale_at', ARGV[2])
  redis.call('HDEL', meta, 'claim', 'claim_batch')
end
return 1
