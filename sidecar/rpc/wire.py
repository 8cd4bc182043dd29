"""What a request's fields mean, checked; and the storage's values as answers.

Task ids, batches, epochs, durability, change sets. Each refusal is INVALID_ARGUMENT (or
LIMIT) naming the task and the field.
"""

from __future__ import annotations

import functools
from typing import Any

from taskstate.proto import chunks, codes, ids
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto.durability import Durability

from .. import errors
from ..config import Limits
from ..errors import SidecarError
from ..storage.values import ChangeSet, TaskKey, TaskMeta

MAX_BATCH = 2**53
MAX_PARTITIONS = 1 << 20  # a rescale writes one task per target partition


def bad(message: str) -> SidecarError:
    """A request that cannot be served as asked (INVALID_ARGUMENT)."""
    return SidecarError(codes.INVALID_ARGUMENT, message)


def task_key(t: pb.TaskId) -> TaskKey:
    """Validate a wire task id (the grammar of taskstate.proto.ids)."""
    return _valid_task(t.namespace, t.component, t.partition)


@functools.lru_cache(maxsize=8192)
def _valid_task(namespace: str, component: str, partition: int) -> TaskKey:
    """The TaskKey of a valid id (remembered: a task's every call names it again)."""
    for problem in (
        ids.name_problem("namespace", namespace),
        ids.name_problem("component", component),
        ids.partition_problem(partition),
    ):
        if problem:
            raise bad(f"invalid task id: {problem}")  # never remembered: raised each time
    return TaskKey(namespace, component, partition)


def scope(namespace: str, component: str) -> tuple[str, str | None]:
    """A namespace and an optional component (empty: none), validated."""
    problem = ids.name_problem("namespace", namespace)
    if problem:
        raise bad(problem)
    if component:
        problem = ids.name_problem("component", component)
        if problem:
            raise bad(problem)
    return namespace, component or None


def partition(value: int) -> int:
    """A partition id, validated."""
    problem = ids.partition_problem(value)
    if problem:
        raise bad(problem)
    return value


def batch(msg: Any, fq: str) -> int | None:
    """A request's optional batch id (None: a batch job)."""
    if not msg.HasField("batch"):
        return None
    if not 0 <= msg.batch <= MAX_BATCH:
        raise bad(f"task {fq}: batch id {msg.batch} is out of range 0..{MAX_BATCH}")
    return int(msg.batch)


def epoch(value: int, fq: str) -> int:
    """A claimed epoch (one an Open answered)."""
    if value < 1:
        raise bad(f"task {fq}: epoch {value} is not a claimed epoch; call Open first")
    return value


def durability(kind: int, replicas: int, fq: str) -> Durability:
    """A request's durability enum and replica count."""
    try:
        return Durability.from_wire(kind, replicas)
    except ValueError as exc:
        raise bad(f"task {fq}: {exc}") from None


def codec(name: str, fq: str) -> str:
    """A codec name (empty: json)."""
    name = name or "json"
    if ids.name_problem("codec", name):
        raise bad(f"task {fq}: invalid codec name {name[:40]!r}")
    return name


def writer(w: pb.Writer) -> str:
    """Who writes, as the task's metadata records it.

    No `executor=` without an executor id: Spark's local mode gives its Python workers
    none (SPARK_EXECUTOR_ID), nor does a LocalContext outside Spark.
    """
    executor = f" executor={w.executor}" if w.executor else ""
    return f"host={w.host}{executor} attempt={w.attempt} pid={w.pid}"[:512]


def declared_partitions(declared: int, task: TaskKey) -> int | None:
    """OpenRequest.partitions: None when not declared (0); refused when impossible."""
    if declared == 0:
        return None
    if declared < 0:
        raise bad(f"task {task.fq}: partitions must be positive, not {declared}")
    if task.partition >= declared:
        raise bad(
            f"task {task.fq}: partition {task.partition} is outside the {declared} "
            f"partitions the task declares (TaskState partitions={declared}): declare the "
            "count the job really splits this component into"
        )
    return declared


def _unpack_array(blob: bytes, fq: str, what: str) -> list[Any]:
    try:
        return chunks.unpack(blob, text=True)
    except Exception as exc:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ...
        raise bad(f"task {fq}: {what} is not a msgpack array ({type(exc).__name__})") from None


def _check_keys(keys: list[Any], fq: str, what: str) -> None:
    # C-level: this runs over every key of every commit
    if keys and set(map(type, keys)) != {str}:
        raise bad(f"task {fq}: {what} holds a key that is not a UTF-8 string")


def unpack_keys(blob: bytes, fq: str, what: str) -> list[str]:
    """A packed list of keys (CommitRequest.packed_deletes, ReadRequest.packed_keys)."""
    keys = _unpack_array(blob, fq, what)
    _check_keys(keys, fq, what)
    return keys


def change_set(request: pb.CommitRequest, fq: str, limits: Limits) -> ChangeSet:
    """A commit's change set, checked against the limits.

    Every key and value a non-empty msgpack str: the blobs go to Redis as they came, and
    are read here only to check them.
    """
    packed, packed_deletes = request.packed_upserts, request.packed_deletes
    flat = _unpack_array(packed, fq, "packed_upserts") if packed else []
    keys, values = flat[0::2], flat[1::2]
    if len(keys) != len(values):
        raise bad(f"task {fq}: packed_upserts has a key without a value")
    _check_keys(keys, fq, "packed_upserts")
    if values and (set(map(type, values)) != {str} or "" in values):  # in C, per commit
        bad_key = next(
            k for k, v in zip(keys, values, strict=True) if v.__class__ is not str or not v
        )
        raise bad(
            f"task {fq}: key {bad_key[:80]!r} has an empty encoded value, or one that is not "
            "a msgpack str"
        )
    deletes = unpack_keys(packed_deletes, fq, "packed_deletes") if packed_deletes else []
    named = keys + deletes
    limits.check_entries(fq, named, values, "commit")
    if deletes and not set(deletes).isdisjoint(keys):
        raise bad(f"task {fq}: a key is both upserted and deleted in one commit")
    return ChangeSet(named, len(keys), packed, packed_deletes, len(packed) + len(packed_deletes))


def task_info(m: TaskMeta) -> pb.TaskInfo:
    """A task's metadata as the wire's TaskInfo."""
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


def seed_page(packed: bytes, namespace: str, component: str, limits: Limits) -> list[str]:
    """A page of a data source write: msgpack [key, value, ...], every item non-empty str.

    A key twice in the page is refused here (the script finds those staged before).
    """
    where = f"{namespace}/{component}"
    try:
        flat = chunks.unpack(packed, text=True)
    except Exception as exc:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ...
        raise bad(f"{where}: a write's page is not msgpack ({exc})") from None
    if len(flat) % 2:
        raise bad(f"{where}: a write's page must be [key, value, key, value, ...]")
    if flat and (set(map(type, flat)) != {str} or min(map(len, flat)) == 0):  # in C
        for i, x in enumerate(flat):
            if not isinstance(x, str) or not x:
                kind = "key" if i % 2 == 0 else f"value of key {str(flat[i - 1])[:80]!r}"
                raise bad(f"{where}: a {kind} is empty or not text; nothing was written")
    keys = flat[0::2]
    if len(set(keys)) != len(keys):
        seen: set[str] = set()
        for k in keys:
            if k in seen:
                raise errors.seed_duplicate(namespace, component, k)
            seen.add(k)
    limits.check_entries(where, keys, flat[1::2], "write")
    return flat
