-- Done(task, batch, attempt): the attempt finished the batch (the executor plugin's flush
-- found its changes durable, just before Spark hears that the task succeeded).
-- KEYS: 1 meta, 2 stash
-- ARGV: 1 batch, 2 attempt (SCOPE:N)
-- Marks meta 'done_batch' and 'done_by' when the attempt still holds the claim at that
-- batch, and returns 1; returns 0 (writing nothing) when another attempt claimed the task
-- since: that one rolled the batch back, so this attempt must not be reported done.
-- A finished batch that a late attempt of the same application rolls back is kept aside
-- (open.lua: the stash), to be made the state again if the late attempt never finishes;
-- once an attempt finishes the batch, the stash is dropped.
local meta, stash = KEYS[1], KEYS[2]
local m = meta_fields(meta, {'claim', 'claim_batch', 'stash_batch'})
if m.claim ~= ARGV[2] or m.claim_batch ~= ARGV[1] then return 0 end
redis.call('HSET', meta, 'done_batch', ARGV[1], 'done_by', ARGV[2])
if m.stash_batch then
  redis.call('UNLINK', stash)
  redis.call('HDEL', meta, unpack(STASH_FIELDS))  -- prelude.lua
end
return 1
