"""The in-memory twin of the Redis backend, for unit tests and `taskstate.testing`.

Same file names as redis/: store (the task protocol and the operator calls: `MemoryStorage`).
"""
