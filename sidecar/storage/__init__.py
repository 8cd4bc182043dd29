"""Where task state lives: one small interface (`base`) and its backends as siblings.

- `redis_backend`: the production backend (standalone Redis; atomic Lua scripts).
- `memory_backend`: the same protocol in process memory, for unit tests.
"""
