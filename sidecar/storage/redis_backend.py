"""The Redis backend: task state in hashes, the protocol in atomic Lua scripts.

The keys (one Redis Cluster slot per task) are spelled in redis/keys.py only.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import resources
from itertools import chain
from typing import Any, TypeVar

import redis.exceptions as rex

from taskstate.proto import codes

from .. import errors, metrics
from ..errors import SidecarError
from ..retry import RetryPolicy
from .base import (
    LAYOUT_VERSION,
    Check,
    CommitResult,
    DoctorReport,
    Durability,
    OpenResult,
    ServerReport,
    TaskKey,
    TaskMeta,
)
from .connect import RedisSettings, create_client, redact
from .redis.keys import index_key, task_keys
from .redis.scan import ServerChangedError, hscan_pages

T = TypeVar("T")
log = logging.getLogger("taskstate.sidecar.redis")
# Errors after which a cluster's slot table may be stale.
_TOPOLOGY_ERRORS = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ClusterError,
    rex.ReadOnlyError,
    rex.MovedError,
)

_GET_CHUNK = 2000
# Below this many fields a restore reads the hash in one HGETALL; above, HSCAN pages.
_HGETALL_MAX = 5000


def _script(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()


def _text(v: bytes | str | None) -> str:
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else v


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


class RedisStorage:
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
        self._retry = retry or RetryPolicy()
        self._durability_timeout_ms = durability_timeout_ms
        if socket_timeout_s is None:
            # long enough for WAIT/WAITAOF; a hung server is cut off by the retry deadline
            socket_timeout_s = max(self._retry.deadline_s, durability_timeout_ms / 1000 + 2)
        self.kind, self._redis = create_client(self.settings, socket_timeout_s=socket_timeout_s)
        self._src = {n: _script(n) for n in ("open", "commit", "get", "import")}
        self._sha = {n: hashlib.sha1(src.encode()).hexdigest() for n, src in self._src.items()}  # noqa: S324 - Redis names scripts by SHA-1
        self._server_version: tuple[int, ...] | None = None
        self._fsync_ok_until = 0.0
        self._fsync_check_ttl_s = fsync_check_ttl_s
        self._refresh_after = 0.0

    # -- plumbing -------------------------------------------------------------

    async def _run(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        """`RetryPolicy.run`, refreshing the cluster's slot table after topology errors."""
        if self.kind != "cluster":
            return await self._retry.run(what, fn)

        async def attempt() -> T:
            try:
                return await fn()
            except _TOPOLOGY_ERRORS:
                await self._refresh_topology()
                raise

        return await self._retry.run(what, attempt)

    async def _refresh_topology(self) -> None:
        """Forget the cluster layout; the next command asks the cluster again."""
        now = time.monotonic()
        if now < self._refresh_after:
            return
        self._refresh_after = now + 0.2
        log.info("refreshing the Redis Cluster layout")
        await self._redis.aclose()

    async def _load_scripts(self, node: Any = None) -> None:
        for src in self._src.values():
            if self.kind == "cluster":
                await self._redis.execute_command("SCRIPT", "LOAD", src, target_nodes=node)
            else:
                await self._redis.script_load(src)

    async def _on_slot(
        self, key: str, commands: Sequence[tuple[Any, ...]]
    ) -> tuple[Any, list[Any]]:
        """Cluster: run `commands` in order, on one connection to the node serving `key`.

        WAIT/WAITAOF must follow the write on the same connection, and an HSCAN must stay
        on one server; so redirections are followed here, never inside the pipeline.
        """
        cluster = self._redis
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
                    await self._refresh_topology()
                    raise rex.TryAgainError(f"ASK to an unknown node {first.host}:{first.port}")
                continue
            return node, replies
        raise rex.TryAgainError("redirected 8 times in a row")

    async def _send(self, key: str, commands: Sequence[tuple[Any, ...]]) -> tuple[Any, list[Any]]:
        """Run `commands` in one pipeline on one connection to the server holding `key`.

        Returns (the cluster node, or None outside a cluster; the replies, errors included).
        """
        if self.kind == "cluster":
            return await self._on_slot(key, commands)
        pipe = self._redis.pipeline(transaction=False)
        for c in commands:
            pipe.execute_command(*c)
        try:
            return None, await pipe.execute(raise_on_error=False)
        except rex.NoScriptError:
            return None, [rex.NoScriptError()]

    async def _evalsha(
        self, name: str, keys: Sequence[str], args: Sequence[Any], wait: tuple[int, ...] = ()
    ) -> Any:
        """EVALSHA (loading the script on NOSCRIPT).

        Optionally followed on the same connection by WAIT / WAITAOF, so that they
        cover this write.
        """
        commands: list[tuple[Any, ...]] = [("EVALSHA", self._sha[name], len(keys), *keys, *args)]
        if wait:
            if wait[0] == 0:
                commands.append(("WAIT", wait[1], wait[2]))
            else:
                commands.append(("WAITAOF", wait[1], wait[2], wait[3]))
        for _ in range(3):
            node, replies = await self._send(keys[0], commands)
            first = replies[0]
            if isinstance(first, rex.NoScriptError):
                # a restarted or failed-over server has an empty script cache
                await self._load_scripts(node)
                continue
            for r in replies:
                if isinstance(r, Exception):
                    raise r
            return replies if wait else first
        raise SidecarError(codes.INTERNAL, f"script {name} could not be loaded into Redis")

    async def _each_server(self, *command: Any) -> list[Any]:
        """Run a keyless command on the server (every primary of a cluster)."""
        if self.kind != "cluster":
            return [await self._redis.execute_command(*command)]
        await self._redis.initialize()
        return [
            await self._redis.execute_command(*command, target_nodes=node)
            for node in self._redis.get_primaries()
        ]

    async def _server(self) -> tuple[int, ...]:
        if self._server_version is None:
            infos = await self._run("info", lambda: self._each_server("INFO", "server"))
            self._server_version = min(
                _version_tuple(str(i.get("redis_version", "0"))) for i in infos
            )
        return self._server_version

    @staticmethod
    def _script_error(
        task: TaskKey, exc: rex.ResponseError, batch: int | None, codec: str = ""
    ) -> Exception:
        """Turn a script's TS* error reply into a SidecarError."""
        kind, _, detail = str(exc).partition(" ")
        if kind == "TSFENCED":
            return errors.fenced(task.fq, detail)
        if kind == "TSAHEAD":
            return errors.state_ahead(task.fq, detail, batch)
        if kind == "TSNOUNDO":
            return errors.cannot_roll_back(task.fq, detail)
        if kind == "TSCODEC":
            return errors.codec_mismatch(task.fq, detail, codec)
        if kind == "TSCORRUPT":
            return errors.corrupt(task.fq, detail)
        return exc

    async def _durability_wait(self, durability: Durability, task: TaskKey) -> tuple[int, ...]:
        """What to send after the write: () nothing, (0, n, ms) WAIT, (1, 1, n, ms) WAITAOF."""
        if durability.fsynced and await self._check_fsync(task) == "waitaof":
            return (1, 1, durability.replicas, self._durability_timeout_ms)
        if durability.replicas:
            return (0, durability.replicas, self._durability_timeout_ms)
        return ()

    async def _check_fsync(self, task: TaskKey | None = None) -> str:
        """How `fsynced` is met: "waitaof" (Redis >= 7.2) or "config" (checked config).

        Redis < 7.2 has no WAITAOF; there a commit is fsynced before Redis replies only
        when the server runs `appendonly yes` with `appendfsync always`, so that is what
        is checked (again after `fsync_check_ttl_s`, as configs and masters change).
        """
        version = await self._server()
        if version >= (7, 2):
            return "waitaof"
        if time.monotonic() < self._fsync_ok_until:
            return "config"
        shown = ".".join(map(str, version))
        where = f"task {task.fq}: " if task is not None else ""
        try:
            configs = await self._run(
                "config", lambda: self._each_server("CONFIG", "GET", "append*")
            )
        except rex.ResponseError as exc:
            raise SidecarError(
                codes.DURABILITY,
                f"{where}durability 'fsynced' on Redis {shown} (no WAITAOF) needs a check that "
                f"the server runs appendonly yes / appendfsync always, and CONFIG GET was "
                f"refused ({exc}). Operator action: allow the sidecar's Redis user "
                "+config|get, upgrade to Redis >= 7.2, or choose durability 'applied' or "
                "'replicated:N'.",
            ) from None
        for cfg in configs:
            named = {_text(k): _text(v) for k, v in cfg.items()}
            aof, fsync = named.get("appendonly", ""), named.get("appendfsync", "")
            if aof != "yes" or fsync != "always":
                raise SidecarError(
                    codes.DURABILITY,
                    f"{where}durability 'fsynced' on Redis {shown} (no WAITAOF) needs "
                    f"'appendonly yes' and 'appendfsync always', but the server runs "
                    f"appendonly={aof or '?'} appendfsync={fsync or '?'}. Operator action: "
                    "configure Redis so, upgrade to Redis >= 7.2 (WAITAOF), or choose "
                    "durability 'applied' or 'replicated:N'.",
                )
        self._fsync_ok_until = time.monotonic() + self._fsync_check_ttl_s
        return "config"

    # -- protocol -------------------------------------------------------------

    async def open(
        self,
        task: TaskKey,
        batch: int | None,
        *,
        codec: str,
        writer: str,
        durability: Durability,
        attempt: str = "",
    ) -> OpenResult:
        """Claim the task; see base.Storage.open."""
        if durability.fsynced:
            await self._check_fsync(task)
        meta, data, undo = task_keys(task)
        args = [
            "" if batch is None else str(batch),
            uuid.uuid4().hex,
            f"{time.time():.3f}",
            writer,
            codec,
            attempt,
        ]

        async def call() -> Any:
            return await self._evalsha("open", (meta, data, undo), args)

        try:
            r = await self._run("open", call)
        except rex.ResponseError as exc:
            raise self._script_error(task, exc, batch, codec) from None
        await self._index(task)
        return OpenResult(
            epoch=int(r[0]),
            committed_batch=int(r[1]),
            position=r[2] if int(r[3]) else None,
            size=int(r[4]),
            version=_text(r[5]),
            rolled_back=bool(int(r[6])),
            rolled_back_keys=int(r[7]),
            reused_claim=bool(int(r[8])),
        )

    async def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[tuple[str | bytes, bytes]]]:
        """Yield the state in chunks; memory is bounded by one chunk, not the state."""
        meta, data, _ = task_keys(task)
        await self._check_epoch(task, meta, epoch)
        size = await self._run("restore", lambda: self._redis.hlen(data))
        if size <= min(_HGETALL_MAX, max_fields):
            items: dict[Any, Any] = await self._run("restore", lambda: self._hgetall(data))
            yield list(items.items())  # keys stay UTF-8 bytes: no per-field work
        else:
            # A server change mid-scan starts the scan again (redis/scan.py): fields sent
            # twice are identical (the epoch fences writers), so the client just overwrites.
            restarts = 0
            while True:
                try:
                    async for items in hscan_pages(
                        self._run, self._scan_page, data, max_fields, None, "restore"
                    ):
                        yield list(items.items())  # keys stay UTF-8 bytes: no per-field work
                    break
                except ServerChangedError:
                    restarts += 1
                    if restarts > 5:
                        raise SidecarError(
                            codes.STORAGE_UNAVAILABLE,
                            f"task {task.fq}: the Redis server holding the state changed 5 "
                            "times during one restore. Retry when the failover or slot "
                            "migration is over.",
                        ) from None
                    log.warning(
                        "the server changed during a restore: scanning again",
                        extra={"task": task.fq},
                    )
        # A newer claim during the scan makes what we sent unreliable: fail, do not guess.
        await self._check_epoch(task, meta, epoch)

    async def _hgetall(self, key: str) -> dict[Any, Any]:
        items: dict[Any, Any] = await self._redis.hgetall(key)
        return items

    async def _scan_page(
        self, key: str, cursor: int, count: int, match: str | None = None
    ) -> tuple[str, int, dict[Any, Any]]:
        """One HSCAN page and the run id of the server that answered it."""
        scan: tuple[Any, ...] = ("HSCAN", key, cursor, "COUNT", count)
        if match is not None:
            scan += ("MATCH", match)
        _, replies = await self._send(key, [scan, ("INFO", "server")])
        for r in replies:
            if isinstance(r, Exception):
                raise r
        (next_cursor, items), info = replies
        return str(info.get("run_id", "")), int(next_cursor), items

    async def _check_epoch(self, task: TaskKey, meta: str, epoch: int) -> None:
        current = await self._run("epoch", lambda: self._redis.hget(meta, "epoch"))
        if current is None or int(current) != epoch:
            raise errors.fenced(task.fq, _text(current) or "none")

    async def version(self, task: TaskKey) -> str:
        """The version token of the task's committed content."""
        meta, _, _ = task_keys(task)
        gen, ver = await self._run("version", lambda: self._redis.hmget(meta, "gen", "ver"))
        return f"{_text(gen)}:{_text(ver)}"

    async def commit(
        self,
        task: TaskKey,
        epoch: int,
        batch: int | None,
        upserts: Sequence[tuple[str, bytes]],
        deletes: Sequence[str],
        position: bytes | None,
        *,
        writer: str,
        durability: Durability,
    ) -> CommitResult:
        """Apply one change set atomically; see base.Storage.commit."""
        meta, data, undo = task_keys(task)
        args: list[Any] = [
            str(epoch),
            "" if batch is None else str(batch),
            b"" if position is None else b"+" + position,
            f"{time.time():.3f}",
            writer,
            str(len(upserts)),
            *chain.from_iterable(upserts),
            *deletes,
        ]
        wait = await self._durability_wait(durability, task)

        async def call() -> Any:
            return await self._evalsha("commit", (meta, data, undo), args, wait)

        try:
            r = await self._run("commit", call)
        except rex.ResponseError as exc:
            raise self._script_error(task, exc, batch) from None
        acked = 0
        if wait:
            r, ack = r[0], r[1]
            if wait[0] == 0:
                acked = int(ack)
                if acked < durability.replicas:
                    raise self._short(task, durability, f"{acked} replica(s) acknowledged")
            else:
                local, acked = int(ack[0]), int(ack[1])
                if local < wait[1] or acked < durability.replicas:
                    raise self._short(
                        task, durability, f"fsynced locally: {local}, replicas fsynced: {acked}"
                    )
        return CommitResult(
            version=_text(r[0]), size=int(r[1]), replicas_acked=acked, base_version=_text(r[2])
        )

    def _short(self, task: TaskKey, durability: Durability, got: str) -> SidecarError:
        return SidecarError(
            codes.DURABILITY,
            f"task {task.fq}: the commit was applied by Redis but did not reach durability "
            f"{durability.describe()!r} within {self._durability_timeout_ms} ms ({got}). "
            "Treat the batch as failed: Spark retries it and the replay is rolled back first. "
            "Operator action: check the replicas / persistence of Redis.",
        )

    async def get(self, task: TaskKey, epoch: int, keys: Sequence[str]) -> list[bytes | None]:
        """Read keys (remote mode), fenced by epoch."""
        meta, data, _ = task_keys(task)
        out: list[bytes | None] = []
        for i in range(0, max(len(keys), 1), _GET_CHUNK):
            part = list(keys[i : i + _GET_CHUNK])

            async def call(part: list[str] = part) -> Any:
                return await self._evalsha("get", (meta, data), [str(epoch), *part])

            try:
                out.extend(await self._run("get", call))
            except rex.ResponseError as exc:
                raise self._script_error(task, exc, None) from None
        return out

    async def describe(self, task: TaskKey) -> TaskMeta:
        """The task's metadata."""
        meta, data, _ = task_keys(task)

        async def call() -> Any:
            pipe = self._redis.pipeline(transaction=False)
            pipe.hgetall(meta)
            pipe.hlen(data)
            return await pipe.execute()

        m, size = await self._run("describe", call)
        return self._meta(task, m, int(size))

    @staticmethod
    def _meta(task: TaskKey, m: dict[bytes, bytes], size: int) -> TaskMeta:
        if not m:
            return TaskMeta(task=task, exists=size > 0, size=size)

        def num(name: str, default: str = "0") -> int:
            try:
                return int(_text(m.get(name.encode())) or default)
            except ValueError:
                return -1

        return TaskMeta(
            task=task,
            exists=True,
            committed_batch=num("batch", "-1"),
            epoch=num("epoch"),
            position=m.get(b"pos"),
            size=size,
            version=f"{_text(m.get(b'gen'))}:{_text(m.get(b'ver'))}",
            codec=_text(m.get(b"codec")),
            layout=num("layout", str(LAYOUT_VERSION)),
            updated_at=float(_text(m.get(b"updated_at")) or 0.0),
            last_writer=_text(m.get(b"last_writer")),
            rollbacks=num("rollbacks"),
        )

    async def _index(self, task: TaskKey) -> None:
        """Record the task in its namespace's index (for listing)."""
        member = f"{task.component}/{task.partition}"
        await self._run("index", lambda: self._redis.sadd(index_key(task.namespace), member))

    async def _members(self, namespace: str, component: str | None) -> list[TaskKey]:
        raw = await self._run("list", lambda: self._redis.smembers(index_key(namespace)))
        tasks = []
        for member in sorted(_text(x) for x in raw):
            comp, _, part = member.rpartition("/")
            if (component is None or comp == component) and part.isdigit():
                tasks.append(TaskKey(namespace, comp, int(part)))
        tasks.sort(key=lambda t: (t.component, t.partition))
        return tasks

    async def list_tasks(self, namespace: str, component: str | None) -> list[TaskMeta]:
        """Every indexed task of the namespace (optionally one component)."""
        return [await self.describe(t) for t in await self._members(namespace, component)]

    async def drop(self, namespace: str, component: str | None, partition: int | None) -> int:
        """Delete the tasks' keys and their index entries."""
        if partition is not None and component is not None:
            targets = [TaskKey(namespace, component, partition)]
        else:
            targets = await self._members(namespace, component)
        dropped = 0
        for t in targets:
            keys = task_keys(t)

            async def call(keys: tuple[str, str, str] = keys, t: TaskKey = t) -> Any:
                n = await self._redis.delete(*keys)
                await self._redis.srem(index_key(namespace), f"{t.component}/{t.partition}")
                return n

            if await self._run("drop", call):
                dropped += 1
        return dropped

    async def read(
        self, task: TaskKey, pattern: str | None, max_fields: int
    ) -> AsyncIterator[Sequence[tuple[str | bytes, bytes]]]:
        """The committed state without a claim; CHANGED when a commit lands meanwhile.

        The version token moves on every commit and rollback, so equal tokens before and
        after the scan mean every page came from one committed state.
        """
        meta, data, _ = task_keys(task)
        before = await self.describe(task)
        if not before.exists:
            raise errors.not_found(task.fq, task.namespace)
        try:
            async for items in hscan_pages(
                self._run, self._scan_page, data, max_fields, pattern, "read"
            ):
                yield list(items.items())
        except ServerChangedError:
            pass  # another server answers now: what was sent may not be one version
        else:
            if await self.version(task) == before.version:
                return
        raise SidecarError(
            codes.CHANGED,
            f"task {task.fq}: the state changed while it was read (a commit, a rollback or "
            "a failover). What was sent is not one version: read it again.",
        )

    async def import_task(
        self,
        task: TaskKey,
        entries: Sequence[tuple[str, bytes]],
        *,
        committed_batch: int,
        position: bytes | None,
        codec: str,
        replace: bool,
        append_epoch: int | None,
    ) -> tuple[int, int]:
        """Create or extend a task from exported state; see base.Storage.import_task."""
        meta, data, undo = task_keys(task)
        mode = "append" if append_epoch is not None else "replace" if replace else "create"
        args: list[Any] = [
            mode,
            str(append_epoch or 0),
            str(committed_batch),
            b"" if position is None else b"+" + position,
            codec,
            uuid.uuid4().hex,
            f"{time.time():.3f}",
            *chain.from_iterable(entries),
        ]

        async def call() -> Any:
            return await self._evalsha("import", (meta, data, undo), args)

        try:
            r = await self._run("import", call)
        except rex.ResponseError as exc:
            kind, _, detail = str(exc).partition(" ")
            if kind == "TSEXISTS":
                raise errors.already_exists(task.fq) from None
            if kind == "TSFENCED":
                raise SidecarError(
                    codes.FENCED,
                    f"task {task.fq}: another import or a running job claimed the task during "
                    f"this import (epoch now {detail}); its state is incomplete. Stop the job "
                    "and import again with --replace.",
                ) from None
            raise
        await self._index(task)
        return int(r[0]), int(r[1])

    async def namespaces(self) -> list[str]:
        """Every namespace with an index set (SCAN on every primary)."""
        head, tail = index_key("*").split("*")  # the index key around the namespace

        async def call() -> list[str]:
            found = set()
            async for key in self._redis.scan_iter(match=index_key("*"), count=1000):
                found.add(_text(key)[len(head) : -len(tail)])
            return sorted(found)

        return await self._run("list", call)

    async def doctor(self, durability: Durability) -> DoctorReport:
        """Topology, each primary's version and persistence, and whether `durability` holds."""
        infos = await self._run("doctor", lambda: self._each_server("INFO"))
        try:
            configs = await self._run(
                "doctor", lambda: self._each_server("CONFIG", "GET", "appendfsync")
            )
            fsyncs = [_text(c.get("appendfsync") or c.get(b"appendfsync")) for c in configs]
        except rex.ResponseError:  # the sidecar's user may not run CONFIG
            fsyncs = ["?"] * len(infos)
        if self.kind == "cluster":  # _each_server went through the primaries in this order
            addresses = [f"{n.host}:{n.port}" for n in self._redis.get_primaries()]
        else:
            addresses = [redact(self.settings.url)]
        servers = [
            ServerReport(
                address=address,
                role=str(info.get("role", "?")),
                version=str(info.get("redis_version", "?")),
                aof_enabled=bool(int(info.get("aof_enabled", 0))),
                appendfsync=fsync or "?",
                connected_replicas=int(info.get("connected_slaves", 0)),
            )
            for address, info, fsync in zip(addresses, infos, fsyncs, strict=False)
        ]
        checks = [Check("redis reachable", True, f"{len(servers)} primary server(s) answered")]
        checks.append(await self._durability_check(durability, servers))
        return DoctorReport(topology=self.kind, servers=servers, checks=checks)

    async def _durability_check(self, durability: Durability, servers: list[ServerReport]) -> Check:
        name = f"durability {durability.describe()}"
        problems = []
        if durability.replicas:
            short = [s for s in servers if s.connected_replicas < durability.replicas]
            if short:
                seen = ", ".join(f"{s.address}: {s.connected_replicas}" for s in short)
                problems.append(
                    f"{len(short)} primary server(s) have fewer than {durability.replicas} "
                    f"connected replica(s) ({seen}); commits would fail with "
                    "DurabilityError. Add replicas or lower N."
                )
        if durability.fsynced:
            no_aof = [s for s in servers if not s.aof_enabled]
            if no_aof:
                problems.append(
                    f"{len(no_aof)} server(s) run without persistence (appendonly no): "
                    "'fsynced' is impossible there. Set 'appendonly yes' (and on Redis < 7.2 "
                    "'appendfsync always'), or choose durability 'applied'."
                )
            else:
                try:
                    await self._check_fsync()
                except SidecarError as exc:
                    problems.append(exc.message)
        if problems:
            return Check(name, False, " ".join(problems))
        return Check(name, True, "possible with this Redis")

    async def ping(self) -> None:
        """Raise when Redis (every primary of a cluster) cannot be reached."""
        if self.kind == "cluster":
            try:
                await self._each_server("PING")
            except _TOPOLOGY_ERRORS:
                await self._refresh_topology()
                raise
        else:
            await self._redis.ping()

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()
