-- Rescale (rescale.py), for each task it reads: hold the task. The epoch goes up and the
-- claim is cleared, so an attempt that opened before is fenced at its next commit, and
-- Open refuses the task (TSRESCALING) until the rescale has written it or retired it.
-- KEYS: 1 meta
-- ARGV: 1 the rescale's lock ("<id>:<target count>"), 2 now
-- Returns 1 (held now, or already by this rescale), 0 (the task has no metadata).
-- Errors: TSRESCALING <lock> (another rescale holds it).
local meta = KEYS[1]
if redis.call('EXISTS', meta) == 0 then return 0 end
local held = redis.call('HGET', meta, 'rescale')
if held and held ~= ARGV[1] then
  return redis.error_reply('TSRESCALING ' .. held)
end
if not held then
  redis.call('HINCRBY', meta, 'epoch', 1)
  redis.call('HSET', meta, 'rescale', ARGV[1], 'rescale_at', ARGV[2])
  redis.call('HDEL', meta, 'claim', 'claim_batch')
end
return 1
