"""The Redis backend: one connection, and over it every store of the sidecar.

The task store, the operators' calls and the data source's writes.
`RedisBackend` builds the pieces once and hands each what it needs; nothing is shared
through inheritance. keys.py is the only place a key is spelled; connect.py turns the
URL into a client; routing.py finds the server, retries and reloads scripts.
"""

from __future__ import annotations

from ...retry import RetryPolicy
from .admin import RedisAdmin
from .connect import RedisSettings
from .records import NamespaceRecords
from .routing import Connection
from .scan import Scanner
from .seed import Seeder
from .store import RedisTaskStore
from .waits import DurabilityWaits


class RedisBackend:
    """Task state in Redis: standalone, Sentinel-managed or Cluster (see connect.py)."""

    def __init__(
        self,
        redis: str | RedisSettings,
        *,
        retry: RetryPolicy | None = None,
        socket_timeout_s: float | None = None,
        durability_timeout_ms: int = 5000,
        fsync_check_ttl_s: float = 5.0,
    ) -> None:
        self.settings = redis if isinstance(redis, RedisSettings) else RedisSettings(url=redis)
        retry = retry or RetryPolicy()
        if socket_timeout_s is None:
            # long enough for WAIT/WAITAOF; a hung server is cut off by the retry deadline
            socket_timeout_s = max(retry.deadline_s, durability_timeout_ms / 1000 + 2)
        self.conn = Connection(self.settings, retry, socket_timeout_s)
        waits = DurabilityWaits(self.conn, durability_timeout_ms, fsync_check_ttl_s)
        records = NamespaceRecords(self.conn)
        scanner = Scanner(self.conn)
        self._seeds = Seeder(self.conn, records)
        self._tasks = RedisTaskStore(self.conn, waits, records, scanner, self._seeds.settle)
        self._admin = RedisAdmin(self.conn, self.settings, waits, records, scanner)

    @property
    def tasks(self) -> RedisTaskStore:
        """The task protocol."""
        return self._tasks

    @property
    def admin(self) -> RedisAdmin:
        """The operators' calls."""
        return self._admin

    @property
    def seeds(self) -> Seeder:
        """Writes of the data source."""
        return self._seeds

    @property
    def kind(self) -> str:
        """The topology: standalone, sentinel or cluster."""
        return self.conn.kind

    async def ping(self) -> None:
        """Raise when Redis (every primary of a cluster) cannot be reached."""
        await self.conn.ping()

    async def close(self) -> None:
        """Close the connection pool."""
        await self.conn.close()
