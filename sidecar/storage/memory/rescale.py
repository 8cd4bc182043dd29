"""`taskstate rescale` in process memory: the same rules as redis/rescale.py, in one step.

There is nothing to resume here (a process that dies takes the state with it), so the
phases collapse into one pass that either changes nothing (a refusal) or everything.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from taskstate.proto import codes
from taskstate.proto.ids import fq_task_id
from taskstate.proto.versions import new_generation

from ... import errors
from ...errors import SidecarError
from ...spark_hash import KEY_TYPES, partition_of
from ..values import RescaleProgress, TaskKey

if TYPE_CHECKING:
    from .store import MemoryState
from .task import _Task


def _rollback_fields(t: _Task) -> dict[str, bytes | None]:
    """The task's rollback record as key -> value before the batch (None: absent)."""
    if t.undo_copy is None:
        return dict(t.undo)
    out: dict[str, bytes | None] = dict(t.undo_copy)
    out.update({k: None for k in t.data if k not in t.undo_copy})
    return out


async def rescale(
    store: MemoryState, namespace: str, component: str, to: int, key_type: str, quiet_s: float
) -> AsyncIterator[RescaleProgress]:
    """See base.AdminStore.rescale."""
    from .task import _Task

    if key_type not in KEY_TYPES:
        raise errors.bad_argument(f"key type {key_type!r} is not one of {', '.join(KEY_TYPES)}")
    if to < 1:
        raise errors.bad_argument(f"--to {to}: a partition count is at least 1")
    sources = sorted(
        (k for k in store.tasks if (k.namespace, k.component) == (namespace, component)),
        key=lambda k: k.partition,
    )
    if not sources:
        raise SidecarError(
            codes.NOT_FOUND,
            f"{namespace}/{component}: no tasks with state. Nothing was changed.",
        )
    now = time.time()
    for k in sources:
        if now - store.tasks[k].updated_at < quiet_s:
            raise SidecarError(
                codes.CHANGED,
                f"{k.fq} was written {now - store.tasks[k].updated_at:.0f} s ago: the query "
                "still runs. Nothing was changed. Stop the query, then rescale.",
            )
    for k in sources:
        stash = store.tasks[k].stash
        if stash is not None:  # lua/open.lua: restored by the next batch
            raise errors.finished_batch_aside(k.fq, stash[0], "rescale")
    counts = {store.tasks[k].partitions for k in sources} - {None}
    recorded = store.partition_counts.get((namespace, component))
    from_count = recorded or max([c for c in counts if c] or [sources[-1].partition + 1])
    if from_count == to and sources[-1].partition < to:
        yield RescaleProgress("done", from_partitions=to, to_partitions=to)
        return
    olds = {k.partition: store.tasks[k] for k in sources}
    for p, t in olds.items():
        for key in t.data:
            try:
                partition_of(key, to, key_type)
            except ValueError as exc:
                raise errors.bad_argument(
                    f"{fq_task_id(namespace, component, p)}: key {key[:80]!r} cannot be read as a "
                    f"{key_type} ({exc}). Nothing was changed."
                ) from None
    yield RescaleProgress("plan", total=len(sources), from_partitions=from_count, to_partitions=to)
    batch = max(t.batch for t in olds.values())
    at_batch = [t for t in olds.values() if t.batch == batch]
    complete = batch >= 0 and all(t.undo_batch == batch for t in at_batch)
    prev = max(t.prev_batch for t in at_batch) if complete else None
    data: dict[int, dict[str, bytes]] = defaultdict(dict)
    undo: dict[int, dict[str, bytes | None]] = defaultdict(dict)
    for i, t in enumerate(olds.values()):
        for key, value in t.data.items():
            data[partition_of(key, to, key_type)][key] = value
        if complete and t.undo_batch == batch:
            for key, before in _rollback_fields(t).items():
                undo[partition_of(key, to, key_type)][key] = before
        yield RescaleProgress("copy", i + 1, len(olds))
    gen = new_generation()
    codec = next((t.codec for t in olds.values() if t.codec), "json")
    for k in sources:
        del store.tasks[k]
    for p in range(to):
        old = olds.get(p)
        store.tasks[TaskKey(namespace, component, p)] = _Task(
            data=data[p],
            epoch=(old.epoch if old else 0) + 1,
            batch=batch,
            gen=gen,
            ver=1,
            codec=codec,
            undo=undo[p] if complete else {},
            undo_batch=batch if complete else None,
            prev_batch=prev if prev is not None else -1,
            updated_at=now,
            last_writer="taskstate rescale",
            log_floor=1,
            log_ver=1,
            log_floor_batch=batch,
            partitions=to,
        )
        yield RescaleProgress("commit", p + 1, to)
    store.partition_counts[(namespace, component)] = to
    yield RescaleProgress(
        "done",
        from_partitions=from_count,
        to_partitions=to,
        keys=sum(len(d) for d in data.values()),
        batch=batch,
    )
