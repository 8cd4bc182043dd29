"""One connection to the Redis that holds the state, and how a command finds its server.

`Connection` owns the client (standalone, Sentinel or Cluster; see connect.py),
the retry policy, the cluster's slot routing (MOVED / ASK followed by hand, so that a
WAIT or an HSCAN stays on the server that took the write or issued the cursor) and the
script cache (loaded again on NOSCRIPT).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.exceptions as rex

from taskstate.proto import codes

from ... import metrics
from ...errors import SidecarError
from ...retry import RetryPolicy
from .connect import RedisSettings, create_client, pack
from .direct import DirectLine
from .scripts import load_all

T = TypeVar("T")
log = logging.getLogger("taskstate.sidecar.redis")
# Errors after which a cluster's slot table may be stale.
TOPOLOGY_ERRORS = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ClusterError,
    rex.ReadOnlyError,
    rex.MovedError,
)


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


class Connection:
    """The client, its retries, its routing and its scripts."""

    def __init__(
        self, settings: RedisSettings, retry: RetryPolicy, socket_timeout_s: float
    ) -> None:
        self.settings = settings
        self.retry = retry
        self.kind, self.client = create_client(settings, socket_timeout_s=socket_timeout_s)
        # a single script call of a standalone Redis: on a connection of its own (direct.py)
        self.direct = DirectLine(self.client.connection_pool) if self.kind == "standalone" else None
        self.scripts = load_all()
        self._server_version: tuple[int, ...] | None = None
        self._refresh_after = 0.0

    async def run(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        """`RetryPolicy.run`, refreshing the cluster's slot table after topology errors."""
        if self.kind != "cluster":
            return await self.retry.run(what, fn)

        async def attempt() -> T:
            try:
                return await fn()
            except TOPOLOGY_ERRORS:
                await self.refresh_topology()
                raise

        return await self.retry.run(what, attempt)

    async def refresh_topology(self) -> None:
        """Forget the cluster layout; the next command asks the cluster again."""
        now = time.monotonic()
        if now < self._refresh_after:
            return
        self._refresh_after = now + 0.2
        log.info("refreshing the Redis Cluster layout")
        await self.client.aclose()

    async def load_scripts(self, node: Any = None) -> None:
        """Load every script into the server (the cluster `node`)."""
        for script in self.scripts.values():
            if self.kind == "cluster":
                await self.client.execute_command(
                    "SCRIPT", "LOAD", script.source, target_nodes=node
                )
            else:
                await self.client.script_load(script.source)

    async def _on_slot(
        self, key: str, commands: Sequence[tuple[Any, ...]]
    ) -> tuple[Any, list[Any]]:
        """Cluster: run `commands` in order, on one connection to the node serving `key`.

        WAIT/WAITAOF must follow the write on the same connection, and an HSCAN must stay
        on one server; so redirections are followed here, never inside the pipeline.
        """
        cluster = self.client
        await cluster.initialize()
        ask = None
        for _ in range(8):
            node = ask or cluster.get_node_from_key(key)
            pipe = cluster.pipeline(transaction=False)
            if ask is not None:
                pipe.execute_command("ASKING", target_nodes=node)
            for c in commands:
                pipe.execute_command(*c, target_nodes=node)
            replies = await pipe.execute(raise_on_error=False, allow_redirections=False)
            if ask is not None:
                replies = replies[1:]
            first = replies[0]
            if isinstance(first, rex.MovedError):
                metrics.REDIS_REDIRECTS.labels("moved").inc()
                log.info(
                    "slot moved: following it",
                    extra={"slot": first.slot_id, "to": f"{first.host}:{first.port}"},
                )
                await cluster.nodes_manager.move_slot(first)
                ask = None
                continue
            if isinstance(first, rex.AskError):
                metrics.REDIS_REDIRECTS.labels("ask").inc()
                ask = cluster.get_node(host=first.host, port=first.port)
                if ask is None:
                    await self.refresh_topology()
                    raise rex.TryAgainError(f"ASK to an unknown node {first.host}:{first.port}")
                continue
            return node, replies
        raise rex.TryAgainError("redirected 8 times in a row")

    async def send(self, key: str, commands: Sequence[tuple[Any, ...]]) -> tuple[Any, list[Any]]:
        """Run `commands` in one pipeline on one connection to the server holding `key`.

        Returns (the cluster node, or None outside a cluster; the replies, errors included).
        """
        if self.kind == "cluster":
            return await self._on_slot(key, commands)
        pipe = self.client.pipeline(transaction=False)
        for c in commands:
            pipe.execute_command(*c)
        try:
            return None, await pipe.execute(raise_on_error=False)
        except rex.NoScriptError:
            return None, [rex.NoScriptError()]

    async def evalsha(
        self, name: str, keys: Sequence[str], args: Sequence[Any], wait: tuple[int, ...] = ()
    ) -> Any:
        """EVALSHA (loading the script on NOSCRIPT).

        Optionally followed on the same connection by WAIT / WAITAOF, so that they
        cover this write.
        """
        sha = self.scripts[name].sha
        commands: list[tuple[Any, ...]] = [("EVALSHA", sha, len(keys), *keys, *args)]
        if wait:
            if wait[0] == 0:
                commands.append(("WAIT", wait[1], wait[2]))
            else:
                commands.append(("WAITAOF", wait[1], wait[2], wait[3]))
        for _ in range(3):
            if len(commands) == 1 and self.kind != "cluster":
                # the common case, one command: without a pipeline's machinery
                try:
                    if self.direct is not None:
                        return await self.direct.call(pack(commands[0]))
                    return await self.client.execute_command(*commands[0])
                except rex.NoScriptError:
                    await self.load_scripts(None)
                    continue
            node, replies = await self.send(keys[0], commands)
            first = replies[0]
            if isinstance(first, rex.NoScriptError):
                # a restarted or failed-over server has an empty script cache
                await self.load_scripts(node)
                continue
            for r in replies:
                if isinstance(r, Exception):
                    raise r
            return replies if wait else first
        raise SidecarError(codes.INTERNAL, f"script {name} could not be loaded into Redis")

    async def each_server(self, *command: Any) -> list[Any]:
        """Run a keyless command on the server (every primary of a cluster)."""
        if self.kind != "cluster":
            return [await self.client.execute_command(*command)]
        await self.client.initialize()
        return [
            await self.client.execute_command(*command, target_nodes=node)
            for node in self.client.get_primaries()
        ]

    async def server_version(self) -> tuple[int, ...]:
        """The lowest Redis version among the primaries (asked once)."""
        if self._server_version is None:
            infos = await self.run("info", lambda: self.each_server("INFO", "server"))
            self._server_version = min(
                _version_tuple(str(i.get("redis_version", "0"))) for i in infos
            )
        return self._server_version

    async def ping(self) -> None:
        """Raise when Redis (every primary of a cluster) cannot be reached."""
        if self.kind == "cluster":
            try:
                await self.each_server("PING")
            except TOPOLOGY_ERRORS:
                await self.refresh_topology()
                raise
        else:
            await self.client.ping()

    async def close(self) -> None:
        """Close the connection pool."""
        if self.direct is not None:
            await self.direct.close()
        await self.client.aclose()
