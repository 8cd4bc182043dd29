"""The in-memory twin of the Redis backend, for unit tests and `taskstate.testing`.

Same file names as redis/: backend (`MemoryBackend`), store (the task protocol), admin
(operator calls) and rescale.
"""
