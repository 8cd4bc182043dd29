"""The calls of Spark tasks: Open, Commit, OpenCommit, Describe (their reads: read.py).

Each takes a request and returns its answer; the call guard (guard.py) counts, limits,
authorizes and maps errors around it, and the store it is given measures (metered.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from taskstate.proto import ids
from taskstate.proto import taskstate_pb2 as pb

from ..config import Limits
from ..logs import REQUEST
from ..storage.base import TaskStore
from ..storage.values import CommitResult, OpenResult, TaskKey
from . import wire
from .wire import bad

log = logging.getLogger("taskstate.sidecar")


class TaskRpcs:
    """taskstate.v1.TaskStateService's task calls over a TaskStore."""

    def __init__(
        self,
        store: TaskStore,
        limits: Limits,
        flush_barrier: bool,
        served: Callable[[TaskKey], None] = lambda task: None,
        opened: Callable[[TaskKey, int | None, str], None] = lambda task, batch, attempt: None,
    ) -> None:
        self.store = store
        self.limits = limits
        self.flush_barrier = flush_barrier  # the executor plugin's barrier runs beside us
        self.served = served  # the sweeper hears of each task opened or committed here
        self.opened = opened  # the flush barrier hears of each attempt's Opens (flush.py)

    async def Open(self, request: pb.OpenRequest) -> pb.OpenResponse:  # noqa: N802
        """Claim the task for an attempt; roll back a replayed batch (see the .proto)."""
        task, batch, how = self._checked_open(request)
        r = await self.store.open(task, batch, **how)
        return self._answer_open(request, task, batch, r)

    def _checked_open(self, request: pb.OpenRequest) -> tuple[TaskKey, int | None, dict[str, Any]]:
        """An Open's task, batch and the rest of its arguments (refused when bad)."""
        task = wire.task_key(request.task)
        batch = wire.batch(request, task.fq)
        problem = ids.attempt_problem(request.attempt_id)
        if problem:
            raise bad(f"task {task.fq}: {problem}")
        how = {
            "codec": wire.codec(request.codec, task.fq),
            "writer": wire.writer(request.writer),
            "durability": wire.durability(request.durability, request.replicas, task.fq),
            "attempt": request.attempt_id,
            "partitions": wire.declared_partitions(request.partitions, task),
            "event_time_ms": request.event_time_ms if request.HasField("event_time_ms") else None,
        }
        return task, batch, how

    def _answer_open(
        self, request: pb.OpenRequest, task: TaskKey, batch: int | None, r: OpenResult
    ) -> pb.OpenResponse:
        """An Open's answer, after the sweeper, the flush barrier and the log heard of it."""
        fields = REQUEST.get()
        if fields is not None:  # the records logged from here on carry the epoch
            fields.add(epoch=r.epoch)
        self.served(task)
        self.opened(task, batch, request.attempt_id)
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
            reused_claim=r.reused_claim,
            flush_barrier=self.flush_barrier,
            now_ms=r.now_ms,
            expired=r.expired,
        )

    async def Commit(self, request: pb.CommitRequest) -> pb.CommitResponse:  # noqa: N802
        """Apply one change set, fenced by the epoch."""
        task = wire.task_key(request.task)
        epoch = wire.epoch(request.epoch, task.fq)
        batch = wire.batch(request, task.fq)
        durability = wire.durability(request.durability, request.replicas, task.fq)
        changes = wire.change_set(request, task.fq, self.limits)
        r = await self.store.commit(
            task,
            epoch,
            batch,
            changes,
            request.position if request.has_position else None,
            writer=wire.writer(request.writer),
            durability=durability,
        )
        self.served(task)
        return _answer_commit(r)

    async def OpenCommit(self, request: pb.OpenCommitRequest) -> pb.OpenCommitResponse:  # noqa: N802
        """Open, then Commit under the epoch it gave: a block that only wrote, in one call.

        Both requests are checked before anything is done (the Commit's task and batch must
        be the Open's, its durability too); then the store runs the two as one script, with
        the refusals and effects of each: a refused Open commits nothing, and a refused
        Commit leaves the claim taken, as two calls would.
        """
        opening, committing = request.open, request.commit
        task, batch, how = self._checked_open(opening)
        same = (
            wire.task_key(committing.task) == task
            and wire.batch(committing, task.fq) == batch
            and (committing.durability, committing.replicas)
            == (opening.durability, opening.replicas)
        )
        if not same or committing.has_position:
            raise bad(
                f"task {task.fq}: OpenCommit's commit must name its open's task, batch and "
                "durability, and carry no position; send Open, then Commit"
            )
        changes = wire.change_set(committing, task.fq, self.limits)
        opened, committed = await self.store.open_commit(task, batch, changes, **how)
        return pb.OpenCommitResponse(
            open=self._answer_open(opening, task, batch, opened),
            commit=_answer_commit(committed),
        )

    async def Describe(self, request: pb.DescribeRequest) -> pb.TaskInfo:  # noqa: N802
        """The task's metadata."""
        return wire.task_info(await self.store.describe(wire.task_key(request.task)))


def _answer_commit(r: CommitResult) -> pb.CommitResponse:
    return pb.CommitResponse(
        version=r.version,
        size=r.size,
        replicas_acked=r.replicas_acked,
        base_version=r.base_version,
    )
