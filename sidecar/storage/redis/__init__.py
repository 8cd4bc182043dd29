"""The Redis backend's parts (being moved here from redis_backend.py, one concern a module)."""
