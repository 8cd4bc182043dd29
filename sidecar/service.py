"""The gRPC service: validates requests, calls the storage, translates errors once.

Every failure leaves as a gRPC status whose trailing metadata carries the stable
taskstate code (`taskstate.proto.codes`); no Python traceback crosses the wire.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
import msgpack
from grpc import aio

from taskstate.proto import codes, ids
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc
from taskstate.proto.durability import Durability

from . import metrics
from .auth import Authorizer, Grant, visible
from .errors import SidecarError
from .flush import FlushCoordinator
from .logs import REQUEST
from .restore import DEFAULT_CHUNK_FIELDS, MAX_CHUNK_FIELDS, entries_chunk, pieces, stream_restore
from .storage.base import Backend
from .storage.values import ChangeSet, TaskKey, TaskMeta

log = logging.getLogger("taskstate.sidecar")
T = TypeVar("T")

MAX_BATCH = 2**53
MAX_PARTITIONS = 1 << 20  # a rescale writes one task per target partition
DEFAULT_QUIET_S = 30.0  # a rescale refuses a component written more recently than this


@dataclass(frozen=True, slots=True)
class Limits:
    """Request limits; each refusal names the limit and the setting that raises it."""

    max_message_bytes: int = 64 << 20
    max_commit_keys: int = 1_000_000
    max_key_bytes: int = 4096
    max_value_bytes: int = 16 << 20
    max_in_flight: int = 1024

    def check_entries(
        self, fq: str, upserts: Sequence[tuple[str, bytes]], deletes: Sequence[str], what: str
    ) -> None:
        """Refuse a change set over the key count, key size or value size limits."""
        n = len(upserts) + len(deletes)
        if n > self.max_commit_keys:
            raise _limit(
                f"task {fq}: this {what} has {n} keys, over the limit of {self.max_commit_keys} "
                "(sidecar --max-commit-keys). Nothing was written. Commit more often "
                "(s.commit(position=...)) or raise --max-commit-keys."
            )
        # UTF-8 takes at most 4 bytes a character: only keys longer than a quarter of the
        # limit can be over it, and usually there are none (one C-level pass decides)
        keys = [k for k, _ in upserts] if upserts else []
        keys += deletes
        limit = self.max_key_bytes
        if max(map(len, keys), default=0) * 4 > limit:
            over = next((k for k in keys if len(k) * 4 > limit and len(k.encode()) > limit), None)
            if over is not None:
                raise _limit(
                    f"task {fq}: key {over[:80]!r}... is {len(over.encode())} bytes, over the "
                    f"limit of {limit} (sidecar --max-key-bytes). Nothing was written. Use "
                    "shorter keys (e.g. a hash of the long one)."
                )
        if upserts:
            key, value = max(upserts, key=lambda kv: len(kv[1]))
            if len(value) > self.max_value_bytes:
                raise _limit(
                    f"task {fq}: the value of key {key[:80]!r} is {len(value)} bytes, over the "
                    f"limit of {self.max_value_bytes} (sidecar --max-value-bytes). Nothing was "
                    "written. Split it over several keys, or raise --max-value-bytes."
                )


def _limit(message: str) -> SidecarError:
    return SidecarError(codes.LIMIT, message)


def _bad(message: str) -> SidecarError:
    return SidecarError(codes.INVALID_ARGUMENT, message)


def task_key(t: pb.TaskId) -> TaskKey:
    """Validate a wire task id (the grammar of taskstate.proto.ids)."""
    for problem in (
        ids.name_problem("namespace", t.namespace),
        ids.name_problem("component", t.component),
        ids.partition_problem(t.partition),
    ):
        if problem:
            raise _bad(f"invalid task id: {problem}")
    return TaskKey(t.namespace, t.component, t.partition)


def _batch(msg: Any, fq: str) -> int | None:
    if not msg.HasField("batch"):
        return None
    if not 0 <= msg.batch <= MAX_BATCH:
        raise _bad(f"task {fq}: batch id {msg.batch} is out of range 0..{MAX_BATCH}")
    return int(msg.batch)


def _epoch(epoch: int, fq: str) -> int:
    if epoch < 1:
        raise _bad(f"task {fq}: epoch {epoch} is not a claimed epoch; call Open first")
    return epoch


def _durability(kind: int, replicas: int, fq: str) -> Durability:
    try:
        return Durability.from_wire(kind, replicas)
    except ValueError as exc:
        raise _bad(f"task {fq}: {exc}") from None


def _writer(w: pb.Writer) -> str:
    return f"host={w.host} executor={w.executor} attempt={w.attempt} pid={w.pid}"[:512]


def _info(m: TaskMeta) -> pb.TaskInfo:
    t = m.task
    return pb.TaskInfo(
        task=pb.TaskId(namespace=t.namespace, component=t.component, partition=t.partition),
        exists=m.exists,
        committed_batch=m.committed_batch,
        epoch=m.epoch,
        position=m.position or b"",
        has_position=m.position is not None,
        size=m.size,
        version=m.version,
        codec=m.codec,
        layout=m.layout,
        updated_at=m.updated_at,
        last_writer=m.last_writer,
        rollbacks=m.rollbacks,
        partitions=m.partitions or 0,
        rescaling=m.rescaling,
    )


def _naming_task(exc: SidecarError, request: Any) -> SidecarError:
    """`exc` with "task NS/COMPONENT/PARTITION: " in front, when it does not say which."""
    task = getattr(request, "task", None)
    if task is None or exc.message.startswith("task "):
        return exc
    fq = ids.fq_task_id(task.namespace, task.component, task.partition)
    return SidecarError(exc.code, f"task {fq}: {exc.message}")


def _unpack_array(blob: bytes, fq: str, what: str) -> list[Any]:
    try:
        items = msgpack.unpackb(blob, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ...
        raise _bad(f"task {fq}: {what} is not a msgpack array ({type(exc).__name__})") from None
    if not isinstance(items, list):
        raise _bad(f"task {fq}: {what} is not a msgpack array")
    return items


def _check_keys(keys: list[Any], fq: str, what: str) -> None:
    # C-level: this runs over every key of every commit
    if keys and set(map(type, keys)) != {str}:
        raise _bad(f"task {fq}: {what} holds a key that is not a UTF-8 string")


def _unpack_keys(blob: bytes, fq: str, what: str) -> list[str]:
    keys = _unpack_array(blob, fq, what)
    _check_keys(keys, fq, what)
    return keys


def _unpack_upserts(blob: bytes, fq: str) -> list[tuple[str, bytes]]:
    """`CommitRequest.packed_upserts` -> pairs, each checked (str key, non-empty bytes)."""
    flat = _unpack_array(blob, fq, "packed_upserts")
    keys, values = flat[0::2], flat[1::2]
    if len(keys) != len(values):
        raise _bad(f"task {fq}: packed_upserts has a key without a value")
    _check_keys(keys, fq, "packed_upserts")
    if values and (set(map(type, values)) != {bytes} or b"" in values):
        bad = next(
            k for k, v in zip(keys, values, strict=True) if v.__class__ is not bytes or not v
        )
        raise _bad(f"task {fq}: key {bad[:80]!r} has an empty or non-binary encoded value")
    return list(zip(keys, values, strict=True))


def _partitions(declared: int, task: TaskKey) -> int | None:
    """OpenRequest.partitions: None when not declared (0); refused when impossible."""
    if declared == 0:
        return None
    if declared < 0:
        raise _bad(f"task {task.fq}: partitions must be positive, not {declared}")
    if task.partition >= declared:
        raise _bad(
            f"task {task.fq}: partition {task.partition} is outside the {declared} "
            f"partitions the task declares (TaskState partitions={declared}): declare the "
            "count the job really splits this component into"
        )
    return declared


def _namespace_of(request: Any) -> str | None:
    """The namespace a request touches: its task's, or its own field (List, Drop, Adopt)."""
    task = getattr(request, "task", None)
    if task is not None:
        return str(task.namespace)
    return getattr(request, "namespace", "") or None


def _request_fields(request: Any) -> dict[str, Any]:
    """task, batch and epoch of a request, for its log records (only what it carries)."""
    out: dict[str, Any] = {}
    t = getattr(request, "task", None)
    if t is not None and t.namespace:
        out["task"] = ids.fq_task_id(t.namespace, t.component, t.partition)
    elif _namespace_of(request):
        out["namespace"] = request.namespace
    if request is not None and "batch" in request.DESCRIPTOR.fields_by_name:
        if request.HasField("batch"):
            out["batch"] = request.batch
    if getattr(request, "epoch", 0):
        out["epoch"] = request.epoch
    return out


@contextmanager
def _observed(method: str, request: Any) -> Iterator[list[str]]:
    """Count the call (in flight, then by outcome) and tag its log records.

    The caller puts the outcome's code in the yielded list; nothing there means "ok".
    """
    token = REQUEST.set(_request_fields(request))
    gauge = metrics.IN_FLIGHT.labels(method)
    gauge.inc()
    outcome: list[str] = []
    try:
        yield outcome
    except BaseException:
        if not outcome:
            outcome.append(codes.INTERNAL)
        raise
    finally:
        gauge.dec()
        metrics.REQUESTS.labels(method, outcome[0] if outcome else "ok").inc()
        try:
            REQUEST.reset(token)
        except ValueError:  # a stream closed from another context: that context ends anyway
            pass


# what a token refusal says the caller tried to do
_VERBS = {
    "Open": "open",
    "Restore": "restore",
    "Commit": "commit to",
    "Get": "read",
    "MultiGet": "read",
    "Describe": "describe",
    "List": "list",
    "Drop": "drop",
    "Adopt": "adopt",
    "Rescale": "rescale",
    "Edit": "edit",
    "Read": "read",
    "Import": "import into",
    "Doctor": "diagnose",
    "Attach": "defer commits to",
}


async def abort(context: aio.ServicerContext[Any, Any], exc: SidecarError) -> NoReturn:
    """End the call with the error's status, its taskstate code in the trailing metadata."""
    log.info("request refused", extra={"code": exc.code, "error": exc.message})
    await context.abort(
        exc.status, exc.message, trailing_metadata=((codes.METADATA_KEY, exc.code),)
    )
    raise AssertionError("abort returned")  # pragma: no cover


class TaskStateServicer(pb_grpc.TaskStateServiceServicer):  # type: ignore[misc]  # no .pyi
    """Implements taskstate.v1.TaskStateService on top of a storage Backend."""

    def __init__(
        self,
        storage: Backend,
        limits: Limits | None = None,
        redis_url: str = "",
        auth: Authorizer | None = None,
        flush: FlushCoordinator | None = None,
    ) -> None:
        self.storage = storage
        self.flush = flush  # None: no executor plugin barrier, every commit is synchronous
        self.limits = limits or Limits()
        self.redis_url = redis_url  # redacted, for Doctor
        self.auth = auth  # None: no tokens (the socket's permissions are the gate)
        self._grant: ContextVar[Grant | None] = ContextVar("taskstate_grant", default=None)
        self._in_flight = 0

    @contextmanager
    def _slot(self, what: str) -> Iterator[None]:
        """Hold one of --max-in-flight request slots; refuse (LIMIT) when none is free."""
        if self._in_flight >= self.limits.max_in_flight:
            raise _limit(
                f"{what}: the sidecar is serving {self._in_flight} requests, its limit "
                f"(--max-in-flight {self.limits.max_in_flight}). Retry shortly; if this is "
                "steady, run more sidecars or raise --max-in-flight."
            )
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1

    def _authorize(
        self, context: aio.ServicerContext[Any, Any], what: str, request: Any
    ) -> Grant | None:
        """With tokens on: the caller's grant, refused unless it covers the namespace."""
        if self.auth is None:
            return None
        metadata: Any = context.invocation_metadata()
        grant: Grant = self.auth.check(metadata, _namespace_of(request), _VERBS.get(what, what))
        return grant

    async def _guard(
        self,
        context: aio.ServicerContext[Any, Any],
        what: str,
        fn: Callable[[], Awaitable[T]],
        request: Any = None,
    ) -> T:
        """Serve one unary call: counted, within the limits, authorized, errors mapped."""
        with _observed(what, request) as outcome:
            try:
                with self._slot(what):
                    self._grant.set(self._authorize(context, what, request))
                    return await fn()
            except Exception as exc:
                await self._refuse(context, what, request, outcome, exc)

    async def _guard_stream(
        self,
        context: aio.ServicerContext[Any, Any],
        what: str,
        fn: Callable[[], AsyncIterator[T]],
        request: Any,
    ) -> AsyncIterator[T]:
        """_guard for a server-streaming call."""
        with _observed(what, request) as outcome:
            try:
                with self._slot(what):
                    self._authorize(context, what, request)
                    async for item in fn():
                        yield item
            except Exception as exc:
                await self._refuse(context, what, request, outcome, exc)

    async def _refuse(
        self,
        context: aio.ServicerContext[Any, Any],
        what: str,
        request: Any,
        outcome: list[str],
        exc: Exception,
    ) -> NoReturn:
        """End a failed call: a SidecarError's code, or INTERNAL (the log gets the trace)."""
        if isinstance(exc, SidecarError):
            outcome.append(exc.code)
            if exc.code == codes.FENCED:
                metrics.FENCED.inc()
            await abort(context, _naming_task(exc, request))
        outcome.append(codes.INTERNAL)
        log.error("unexpected failure in %s", what, exc_info=exc)
        await abort(
            context,
            SidecarError(codes.INTERNAL, f"internal error in {what}: {type(exc).__name__}"),
        )

    async def Open(  # noqa: D102
        self, request: pb.OpenRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.OpenResponse:
        async def run() -> pb.OpenResponse:
            task = task_key(request.task)
            batch = _batch(request, task.fq)
            durability = _durability(request.durability, request.replicas, task.fq)
            codec = request.codec or "json"
            if ids.name_problem("codec", codec):
                raise _bad(f"task {task.fq}: invalid codec name {codec[:40]!r}")
            problem = ids.attempt_problem(request.attempt_id)
            if problem:
                raise _bad(f"task {task.fq}: {problem}")
            r = await self.storage.tasks.open(
                task,
                batch,
                codec=codec,
                writer=_writer(request.writer),
                durability=durability,
                attempt=request.attempt_id,
                partitions=_partitions(request.partitions, task),
            )
            if r.reused_claim:
                metrics.CLAIMS_REUSED.inc()
            if r.rolled_back:
                metrics.ROLLBACKS.inc()
                metrics.ROLLED_BACK_KEYS.inc(r.rolled_back_keys)
            REQUEST.set({**(REQUEST.get() or {}), "epoch": r.epoch})
            log.log(
                logging.INFO if r.rolled_back else logging.DEBUG,
                "task opened (replayed batch rolled back)" if r.rolled_back else "task opened",
                extra={
                    "task": task.fq,
                    "batch": batch,
                    "epoch": r.epoch,
                    "attempt": request.attempt_id,
                    "reused_claim": r.reused_claim,
                    "rolled_back": r.rolled_back,
                    "rolled_back_keys": r.rolled_back_keys,
                },
            )
            return pb.OpenResponse(
                epoch=r.epoch,
                committed_batch=r.committed_batch,
                position=r.position or b"",
                has_position=r.position is not None,
                size=r.size,
                version=r.version,
                rolled_back=r.rolled_back,
                rolled_back_keys=r.rolled_back_keys,
                packed_commits=True,
                reused_claim=r.reused_claim,
                packed_gets=True,
                flush_barrier=self.flush is not None,
            )

        return await self._guard(context, "Open", run, request)

    async def Restore(  # noqa: D102
        self, request: pb.RestoreRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.RestoreChunk]:
        async def run() -> AsyncIterator[pb.RestoreChunk]:
            task = task_key(request.task)
            epoch = _epoch(request.epoch, task.fq)
            async for chunk in stream_restore(self.storage.tasks, task, epoch, request):
                yield chunk

        async for chunk in self._guard_stream(context, "Restore", run, request):
            yield chunk

    async def Commit(  # noqa: D102
        self, request: pb.CommitRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.CommitResponse:
        async def run() -> pb.CommitResponse:
            task = task_key(request.task)
            epoch = _epoch(request.epoch, task.fq)
            batch = _batch(request, task.fq)
            durability = _durability(request.durability, request.replicas, task.fq)
            upserts = [(e.key, e.value) for e in request.upserts]
            for k, v in upserts:
                if not v:
                    raise _bad(f"task {task.fq}: key {k[:80]!r} has an empty encoded value")
            deletes = list(request.deletes)
            if request.packed_upserts:
                upserts.extend(_unpack_upserts(request.packed_upserts, task.fq))
            if request.packed_deletes:
                deletes.extend(_unpack_keys(request.packed_deletes, task.fq, "packed_deletes"))
            self.limits.check_entries(task.fq, upserts, deletes, "commit")
            if deletes and not set(deletes).isdisjoint(k for k, _ in upserts):
                raise _bad(f"task {task.fq}: a key is both upserted and deleted in one commit")
            t0 = time.perf_counter()
            r = await self.storage.tasks.commit(
                task,
                epoch,
                batch,
                ChangeSet(upserts, deletes),
                request.position if request.has_position else None,
                writer=_writer(request.writer),
                durability=durability,
            )
            metrics.COMMIT_SECONDS.observe(time.perf_counter() - t0)
            metrics.COMMITS.inc()
            metrics.COMMIT_KEYS.inc(len(upserts) + len(deletes))
            metrics.COMMIT_BYTES.inc(
                len(request.packed_upserts) + len(request.packed_deletes)
                if request.packed_upserts or request.packed_deletes
                else sum(len(k) + len(v) for k, v in upserts) + sum(map(len, deletes))
            )
            return pb.CommitResponse(
                version=r.version,
                size=r.size,
                replicas_acked=r.replicas_acked,
                base_version=r.base_version,
            )

        return await self._guard(context, "Commit", run, request)

    async def _get(
        self, request: pb.GetRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.GetResponse:
        async def run() -> pb.GetResponse:
            task = task_key(request.task)
            epoch = _epoch(request.epoch, task.fq)
            keys = list(request.keys)
            if request.packed_keys:
                keys.extend(_unpack_keys(request.packed_keys, task.fq, "packed_keys"))
            values = await self.storage.tasks.get(task, epoch, keys)
            absent = values.count(None)
            metrics.GET_KEYS.labels("found").inc(len(values) - absent)
            metrics.GET_KEYS.labels("absent").inc(absent)
            if request.packed_keys:
                return pb.GetResponse(packed_values=msgpack.packb(values, use_bin_type=True))
            return pb.GetResponse(
                values=[pb.OptionalValue(found=v is not None, value=v or b"") for v in values]
            )

        return await self._guard(context, "Get", run, request)

    async def Get(  # noqa: D102
        self, request: pb.GetRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.GetResponse:
        if len(request.keys) != 1:
            await abort(context, _bad("Get takes exactly one key; use MultiGet"))
        return await self._get(request, context)

    async def MultiGet(  # noqa: D102
        self, request: pb.GetRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.GetResponse:
        return await self._get(request, context)

    async def Describe(  # noqa: D102
        self, request: pb.DescribeRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.TaskInfo:
        async def run() -> pb.TaskInfo:
            return _info(await self.storage.tasks.describe(task_key(request.task)))

        return await self._guard(context, "Describe", run, request)

    def _scope(self, namespace: str, component: str) -> tuple[str, str | None]:
        problem = ids.name_problem("namespace", namespace)
        if problem:
            raise _bad(problem)
        if component:
            problem = ids.name_problem("component", component)
            if problem:
                raise _bad(problem)
        return namespace, component or None

    async def List(  # noqa: D102
        self, request: pb.ListRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListResponse:
        async def run() -> pb.ListResponse:
            if not request.namespace and not request.component:
                names = await self.storage.admin.namespaces()
                return pb.ListResponse(namespaces=visible(self._grant.get(), names))
            ns, comp = self._scope(request.namespace, request.component)
            metas = await self.storage.admin.list_tasks(ns, comp)
            return pb.ListResponse(tasks=[_info(m) for m in metas])

        return await self._guard(context, "List", run, request)

    async def Drop(  # noqa: D102
        self, request: pb.DropRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.DropResponse:
        async def run() -> pb.DropResponse:
            ns, comp = self._scope(request.namespace, request.component)
            part: int | None = None
            if request.HasField("partition"):
                if comp is None:
                    raise _bad("Drop with a partition needs a component")
                problem = ids.partition_problem(request.partition)
                if problem:
                    raise _bad(problem)
                part = request.partition
            n = await self.storage.admin.drop(ns, comp, part)
            log.warning(
                "state dropped",
                extra={"namespace": ns, "component": comp, "partition": part, "tasks": n},
            )
            return pb.DropResponse(tasks_dropped=n)

        return await self._guard(context, "Drop", run, request)

    async def Adopt(  # noqa: D102
        self, request: pb.AdoptRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.AdoptResponse:
        async def run() -> pb.AdoptResponse:
            ns, _ = self._scope(request.namespace, "")
            known, tasks = await self.storage.admin.adopt(ns)
            log.warning(
                "namespace adopted: its query goes on from the batch it runs next",
                extra={"namespace": ns, "known_before": known, "tasks": tasks},
            )
            return pb.AdoptResponse(known_before=known, tasks=tasks)

        return await self._guard(context, "Adopt", run, request)

    async def Rescale(  # noqa: D102
        self, request: pb.RescaleRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.RescaleProgress]:
        async def run() -> AsyncIterator[pb.RescaleProgress]:
            ns, comp = self._scope(request.namespace, request.component)
            if comp is None:
                raise _bad("Rescale needs a component: NAMESPACE/COMPONENT")
            if not 1 <= request.to <= MAX_PARTITIONS:
                raise _bad(f"{ns}/{comp}: --to {request.to} is not a partition count "
                           f"between 1 and {MAX_PARTITIONS}")  # fmt: skip
            quiet = DEFAULT_QUIET_S
            if request.HasField("quiet_seconds"):
                quiet = max(0.0, request.quiet_seconds)
            key_type = request.key_type or "string"
            log.warning(
                "rescale started",
                extra={"namespace": ns, "component": comp, "to": request.to, "key_type": key_type},
            )
            async for step in self.storage.admin.rescale(ns, comp, request.to, key_type, quiet):
                if step.phase == "done":
                    log.warning(
                        "rescale done",
                        extra={"namespace": ns, "component": comp, "from": step.from_partitions,
                               "to": step.to_partitions, "keys": step.keys, "batch": step.batch},
                    )  # fmt: skip
                yield pb.RescaleProgress(
                    phase=step.phase,
                    done=step.done,
                    total=step.total,
                    from_partitions=step.from_partitions,
                    to_partitions=step.to_partitions,
                    keys=step.keys,
                    batch=step.batch,
                    resumed=step.resumed,
                )

        async for step in self._guard_stream(context, "Rescale", run, request):
            yield step

    async def Edit(  # noqa: D102
        self, request: pb.EditRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.EditResponse:
        async def run() -> pb.EditResponse:
            ns, comp = self._scope(request.namespace, request.component)
            if comp is None:
                raise _bad("Edit needs a component")
            if not request.key:
                raise _bad(f"{ns}/{comp}: Edit needs a key")
            value = None if request.delete else bytes(request.value)
            if value is not None and not value:
                raise _bad(f"{ns}/{comp}: key {request.key[:80]!r} has an empty encoded value")
            codec = request.codec or "json"
            if request.HasField("partition"):
                problem = ids.partition_problem(request.partition)
                if problem:
                    raise _bad(problem)
                tasks = [TaskKey(ns, comp, request.partition)]
            elif request.delete:
                tasks = [m.task for m in await self.storage.admin.list_tasks(ns, comp)]
            else:
                raise _bad(f"{ns}/{comp}: setting a key needs the task's partition")
            had = 0
            for task in tasks:
                had += await self.storage.admin.edit(task, request.key, value, codec)
            log.warning(
                "state edited by an operator",
                extra={"namespace": ns, "component": comp, "tasks": len(tasks),
                       "had_key": had, "delete": request.delete},
            )  # fmt: skip
            return pb.EditResponse(tasks=len(tasks), had_key=had)

        return await self._guard(context, "Edit", run, request)

    async def Read(  # noqa: D102
        self, request: pb.ReadRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.RestoreChunk]:
        async def run() -> AsyncIterator[pb.RestoreChunk]:
            task = task_key(request.task)
            n = max(1, min(request.max_fields or DEFAULT_CHUNK_FIELDS, MAX_CHUNK_FIELDS))
            async for items in self.storage.admin.read(task, request.pattern or None, n):
                for piece in pieces(items):
                    yield entries_chunk(piece)
            yield pb.RestoreChunk(last=True, version=await self.storage.tasks.version(task))

        async for chunk in self._guard_stream(context, "Read", run, request):
            yield chunk

    async def Import(  # noqa: D102
        self, request: pb.ImportRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ImportResponse:
        async def run() -> pb.ImportResponse:
            task = task_key(request.task)
            entries = [(e.key, e.value) for e in request.entries]
            bad = next((k for k, v in entries if not v), None)
            if bad is not None:
                raise _bad(f"task {task.fq}: key {bad[:80]!r} has an empty encoded value")
            self.limits.check_entries(task.fq, entries, (), "import")
            codec = request.codec or "json"
            if ids.name_problem("codec", codec):
                raise _bad(f"task {task.fq}: invalid codec name {codec[:40]!r}")
            if not -1 <= request.committed_batch <= MAX_BATCH:
                raise _bad(
                    f"task {task.fq}: committed batch {request.committed_batch} is out of range"
                )
            if not 0 <= request.partitions <= MAX_PARTITIONS:
                raise _bad(f"task {task.fq}: partitions {request.partitions} is out of range")
            epoch, size = await self.storage.admin.import_task(
                task,
                entries,
                committed_batch=request.committed_batch,
                position=request.position if request.has_position else None,
                codec=codec,
                replace=request.replace,
                append_epoch=_epoch(request.epoch, task.fq) if request.append else None,
                partitions=request.partitions or None,
            )
            log.warning(
                "state imported",
                extra={"task": task.fq, "keys": len(entries), "append": request.append},
            )
            return pb.ImportResponse(epoch=epoch, size=size)

        return await self._guard(context, "Import", run, request)

    async def Attach(  # noqa: D102
        self,
        requests: AsyncIterator[pb.AttachMessage],
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.AttachOrder]:
        # not counted against --max-in-flight: one long-lived stream per worker process;
        # any valid token may attach (the flush itself commits through Commit, per task)
        with _observed("Attach", None) as outcome:
            try:
                if self.flush is None:
                    raise SidecarError(
                        codes.CONFIG,
                        "Attach: this sidecar has no flush barrier (it runs without the "
                        "executor plugin); commit each block instead.",
                    )
                self._authorize(context, "Attach", None)
                async for order in self.flush.attach(requests):
                    yield order
            except asyncio.CancelledError:
                outcome.append("ok")  # the worker went away (exited or killed): a normal end
                raise
            except Exception as exc:
                await self._refuse(context, "Attach", None, outcome, exc)

    async def Doctor(  # noqa: D102
        self, request: pb.DoctorRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.DoctorResponse:
        async def run() -> pb.DoctorResponse:
            durability = _durability(request.durability, request.replicas, "doctor")
            r = await self.storage.admin.doctor(durability)
            return pb.DoctorResponse(
                topology=r.topology,
                redis_url=self.redis_url,
                servers=[
                    pb.ServerReport(
                        address=s.address,
                        role=s.role,
                        version=s.version,
                        aof_enabled=s.aof_enabled,
                        appendfsync=s.appendfsync,
                        connected_replicas=s.connected_replicas,
                    )
                    for s in r.servers
                ],
                checks=[pb.Check(name=c.name, ok=c.ok, detail=c.detail) for c in r.checks],
            )

        return await self._guard(context, "Doctor", run, request)


__all__ = ["SERVICE_NAME", "Limits", "TaskStateServicer", "add_to_server", "task_key"]


# -- registration: requests that do not parse get INVALID_ARGUMENT, not gRPC's UNKNOWN ----

_SERVICE = pb.DESCRIPTOR.services_by_name["TaskStateService"]
SERVICE_NAME = _SERVICE.full_name


@dataclass(frozen=True, slots=True)
class _Malformed:
    """Bytes that are not the request message (or carry a string that is not UTF-8)."""

    message: str
    error: str


def _lenient(cls: Any) -> Callable[[bytes], Any]:
    def parse(raw: bytes) -> Any:
        try:
            return cls.FromString(raw)
        except Exception as exc:  # DecodeError, or invalid UTF-8 in a string field
            return _Malformed(cls.DESCRIPTOR.name, str(exc)[:200])

    return parse


def add_to_server(servicer: TaskStateServicer, server: aio.Server) -> None:
    """Register every RPC of the .proto, parsing requests leniently.

    Like the generated helper, except that bytes that are not the request message get
    INVALID_ARGUMENT with a taskstate code instead of gRPC's bare UNKNOWN.
    """

    async def refuse(method: str, bad: _Malformed, context: aio.ServicerContext[Any, Any]) -> None:
        with _observed(method, None) as outcome:
            outcome.append(codes.INVALID_ARGUMENT)
            await abort(
                context,
                _bad(
                    f"{method}: the request is not a valid {bad.message} ({bad.error}). Use a "
                    "taskstate client or the stubs generated from proto/taskstate.proto."
                ),
            )

    def unary(method: str) -> Callable[..., Awaitable[Any]]:
        impl = getattr(servicer, method)

        async def handle(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Malformed):
                await refuse(method, request, context)
            return await impl(request, context)

        return handle

    def stream(method: str) -> Callable[..., AsyncIterator[Any]]:
        impl = getattr(servicer, method)

        async def handle(
            request: Any, context: aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            if isinstance(request, _Malformed):
                await refuse(method, request, context)
            async for item in impl(request, context):
                yield item

        return handle

    handlers = {}
    for m in _SERVICE.methods:
        if m.client_streaming:  # Attach: a bidirectional stream of small control messages
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(
                getattr(servicer, m.name),
                request_deserializer=getattr(pb, m.input_type.name).FromString,
                response_serializer=getattr(pb, m.output_type.name).SerializeToString,
            )
            continue
        make = (
            grpc.unary_stream_rpc_method_handler
            if m.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[m.name] = make(
            (stream if m.server_streaming else unary)(m.name),
            request_deserializer=_lenient(getattr(pb, m.input_type.name)),
            response_serializer=getattr(pb, m.output_type.name).SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
