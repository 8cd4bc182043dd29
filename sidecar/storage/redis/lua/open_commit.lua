-- OpenCommit(task, batch, attempt, change set): open.lua, then commit.lua under the epoch
-- the Open gave, in one script (a block that only wrote: one round trip, one script).
-- KEYS: open.lua's (commit.lua takes 1 meta, 2 data, 3 undo, 4 log, 6 ttl)
-- ARGV: open.lua's 1-13, then commit.lua's 14 position, 15 log_entry, 16 upserts,
--       17 deletes (its batch, now and writer are open.lua's 1, 3 and 4)
-- Returns field/value pairs: open (open.lua's reply), commit (commit.lua's).
-- Errors: open.lua's, and nothing is written; then commit.lua's, and the claim stays taken,
-- as after an Open whose Commit was refused (the client sees the error either way).
local function open_part(KEYS, ARGV)
--#include open.lua
end
local function commit_part(KEYS, ARGV)
--#include commit.lua
end
local opened = open_part(KEYS, ARGV)
if opened.err then return opened end
local committed = commit_part(
  {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]},
  {string.format('%d', reply_field(opened, 'epoch')), ARGV[1], ARGV[14], ARGV[3], ARGV[4], ARGV[15], ARGV[16],
   ARGV[17]})
if committed.err then return committed end
return {'open', opened, 'commit', committed}
