"""The Redis backend: task state in hashes, the protocol in atomic Lua scripts.

Layout (every key of a task carries the hash tag `{namespace/component/partition}`, so a
task lives in one Redis Cluster slot and one script can touch all its keys):

- `ts:{ns/comp/p}:data`  hash, field = user key, value = encoded value
- `ts:{ns/comp/p}:meta`  hash: layout, codec, batch, epoch, pos, gen, ver, undo_batch,
  prev_batch, prev_pos, updated_at, opened_at, last_writer, rollbacks
- `ts:{ns/comp/p}:undo`  hash: the rollback record of the last written batch
- `ts:idx:{ns}`          set of `component/partition`: only an index, for listing
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from taskstate.proto import codes

from .. import errors
from ..errors import SidecarError
from ..retry import RetryPolicy
from .base import LAYOUT_VERSION, CommitResult, Durability, OpenResult, TaskKey, TaskMeta

_GET_CHUNK = 2000
# Below this many fields a restore reads the hash in one HGETALL; above, HSCAN pages.
_HGETALL_MAX = 5000


def _script(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()


def task_keys(task: TaskKey) -> tuple[str, str, str]:
    """(meta, data, undo) keys of a task."""
    tag = "{" + task.fq + "}"
    return f"ts:{tag}:meta", f"ts:{tag}:data", f"ts:{tag}:undo"


def index_key(namespace: str) -> str:
    """The per-namespace index set (its own slot)."""
    return "ts:idx:{" + namespace + "}"


def _text(v: bytes | str | None) -> str:
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else v


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


class RedisStorage:
    """Task state in one standalone Redis (Sentinel and Cluster: see issue 5)."""

    def __init__(
        self,
        url: str,
        *,
        retry: RetryPolicy | None = None,
        socket_timeout_s: float = 30.0,
        durability_timeout_ms: int = 5000,
    ) -> None:
        # redis-py's own retries are off: RetryPolicy is the only retry layer.
        self._redis: aioredis.Redis = aioredis.from_url(
            url,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=5.0,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=10,
        )
        self._retry = retry or RetryPolicy()
        self._durability_timeout_ms = durability_timeout_ms
        self._src = {n: _script(n) for n in ("open", "commit", "get")}
        self._sha: dict[str, str] = {}
        self._server_version: tuple[int, ...] | None = None

    # -- plumbing -------------------------------------------------------------

    async def _load_scripts(self) -> None:
        for name, src in self._src.items():
            self._sha[name] = await self._redis.script_load(src)

    async def _evalsha(
        self, name: str, keys: Sequence[str], args: Sequence[Any], wait: tuple[int, ...] = ()
    ) -> Any:
        """EVALSHA (loading the script on NOSCRIPT).

        Optionally followed on the same connection by WAIT / WAITAOF, so that they
        cover this write.
        """
        if name not in self._sha:
            await self._load_scripts()
        for _ in range(2):
            pipe = self._redis.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", self._sha[name], len(keys), *keys, *args)
            if wait:
                if wait[0] == 0:
                    pipe.execute_command("WAIT", wait[1], wait[2])
                else:
                    pipe.execute_command("WAITAOF", wait[1], wait[2], wait[3])
            try:
                replies = await pipe.execute(raise_on_error=False)
            except rex.NoScriptError:
                await self._load_scripts()
                continue
            first = replies[0]
            if isinstance(first, rex.NoScriptError):
                await self._load_scripts()
                continue
            for r in replies:
                if isinstance(r, Exception):
                    raise r
            return replies if wait else first
        raise SidecarError(codes.INTERNAL, f"script {name} could not be loaded into Redis")

    async def _server(self) -> tuple[int, ...]:
        if self._server_version is None:
            info = await self._redis.info("server")
            self._server_version = _version_tuple(str(info.get("redis_version", "0")))
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

    async def _durability_wait(self, durability: Durability) -> tuple[int, ...]:
        if durability.fsynced:
            await self._check_fsync_supported()
            return (1, 1, durability.replicas, self._durability_timeout_ms)
        if durability.replicas:
            return (0, durability.replicas, self._durability_timeout_ms)
        return ()

    async def _check_fsync_supported(self) -> None:
        version = await self._server()
        if version < (7, 2):
            raise SidecarError(
                codes.DURABILITY,
                "durability 'fsynced' needs WAITAOF, which Redis "
                f"{'.'.join(map(str, version))} does not have (Redis >= 7.2 does). "
                "Operator action: upgrade Redis, or choose durability 'applied' or "
                "'replicated:N'.",
            )

    # -- protocol -------------------------------------------------------------

    async def open(
        self,
        task: TaskKey,
        batch: int | None,
        *,
        codec: str,
        writer: str,
        durability: Durability,
    ) -> OpenResult:
        """Claim the task; see base.Storage.open."""
        if durability.fsynced:
            await self._retry.run("open", self._check_fsync_supported)
        meta, data, undo = task_keys(task)
        args = [
            "" if batch is None else str(batch),
            uuid.uuid4().hex,
            f"{time.time():.3f}",
            writer,
            codec,
        ]

        async def call() -> Any:
            return await self._evalsha("open", (meta, data, undo), args)

        try:
            r = await self._retry.run("open", call)
        except rex.ResponseError as exc:
            raise self._script_error(task, exc, batch, codec) from None
        await self._retry.run(
            "index",
            lambda: self._redis.sadd(
                index_key(task.namespace), f"{task.component}/{task.partition}"
            ),
        )
        return OpenResult(
            epoch=int(r[0]),
            committed_batch=int(r[1]),
            position=r[2] if int(r[3]) else None,
            size=int(r[4]),
            version=_text(r[5]),
            rolled_back=bool(int(r[6])),
            rolled_back_keys=int(r[7]),
        )

    async def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[tuple[str, bytes]]]:
        """Yield the state in chunks; memory is bounded by one chunk, not the state."""
        meta, data, _ = task_keys(task)
        await self._check_epoch(task, meta, epoch)
        size = await self._retry.run("restore", lambda: self._redis.hlen(data))
        if size <= min(_HGETALL_MAX, max_fields):
            items: dict[Any, Any] = await self._retry.run("restore", lambda: self._hgetall(data))
            yield [(k.decode(), v) for k, v in items.items()]
        else:
            cursor = 0
            while True:
                cur = cursor

                async def page(cur: int = cur) -> Any:
                    return await self._redis.hscan(data, cur, count=max_fields)

                cursor, items = await self._retry.run("restore", page)
                if items:
                    yield [(k.decode(), v) for k, v in items.items()]
                if cursor == 0:
                    break
        # A newer claim during the scan makes what we sent unreliable: fail, do not guess.
        await self._check_epoch(task, meta, epoch)

    async def _hgetall(self, key: str) -> dict[Any, Any]:
        return await self._redis.hgetall(key)

    async def _check_epoch(self, task: TaskKey, meta: str, epoch: int) -> None:
        current = await self._retry.run("epoch", lambda: self._redis.hget(meta, "epoch"))
        if current is None or int(current) != epoch:
            raise errors.fenced(task.fq, _text(current) or "none")

    async def version(self, task: TaskKey) -> str:
        """The version token of the task's committed content."""
        meta, _, _ = task_keys(task)
        gen, ver = await self._retry.run("version", lambda: self._redis.hmget(meta, "gen", "ver"))
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
        ]
        for k, v in upserts:
            args.append(k)
            args.append(v)
        args.extend(deletes)
        wait = await self._durability_wait(durability)

        async def call() -> Any:
            return await self._evalsha("commit", (meta, data, undo), args, wait)

        try:
            r = await self._retry.run("commit", call)
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
        return CommitResult(version=_text(r[0]), size=int(r[1]), replicas_acked=acked)

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
                out.extend(await self._retry.run("get", call))
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

        m, size = await self._retry.run("describe", call)
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

    async def _members(self, namespace: str, component: str | None) -> list[TaskKey]:
        raw = await self._retry.run("list", lambda: self._redis.smembers(index_key(namespace)))
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

            if await self._retry.run("drop", call):
                dropped += 1
        return dropped

    async def ping(self) -> None:
        """Raise when Redis cannot be reached."""
        await self._redis.ping()

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()
