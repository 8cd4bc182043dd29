"""The Redis backend, one concern a module.

backend (`RedisBackend`: one connection, the task store and the operators' calls over
it), store (the task protocol), admin (operator calls), rescale (a component's move to
another partition count), records (a namespace's index and record), meta (a task's
metadata read back), changelog (the change log behind delta restores), keys (the only
place a key is spelled), scripts and lua/ (the atomic steps and their refusals),
routing (the connection, retries, cluster redirections), connect (URL to client), scan
(HSCAN paging), waits (WAIT / WAITAOF), safety (persistence and eviction checks), seen
(versions this sidecar saw) and replies.
"""
