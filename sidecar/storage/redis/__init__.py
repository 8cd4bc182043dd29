"""The Redis backend, one concern a module.

keys (the only place a key is spelled), routing (the connection, retries, cluster
redirections, scripts on NOSCRIPT), scripts and lua/, scan (HSCAN paging), durability
(WAIT / WAITAOF), store (the task protocol: `RedisStorage`) and admin (operator calls).
"""
