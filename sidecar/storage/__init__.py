"""Where task state lives: one small interface (`base`) and its backends as siblings.

- `redis/`: the production backend (standalone, Sentinel or Cluster; atomic Lua scripts).
- `memory/`: the same protocol in process memory, for unit tests and `taskstate.testing`.
"""
