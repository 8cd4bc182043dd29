"""Read: every read of a task's state, a task attempt's (fenced) and claim-free ones.

The request is checked here; sidecar/read.py streams the answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from taskstate.proto import taskstate_pb2 as pb

from .. import read
from ..config import Limits
from ..storage.base import AdminStore, TaskStore
from . import wire
from .wire import MAX_BATCH, bad


class ReadRpcs:
    """taskstate.v1.TaskStateService's Read, over the task store and the admin store."""

    def __init__(self, tasks: TaskStore, admin: AdminStore, limits: Limits) -> None:
        self.tasks = tasks  # fenced reads: measured (storage/metered.py)
        self.admin = admin
        self.limits = limits

    def Read(self, request: pb.ReadRequest) -> AsyncIterator[pb.ReadChunk]:  # noqa: N802
        """A task's state in chunks, all of one version (see the .proto).

        The request is checked at the call; the chunks come from sidecar/read.py's stream
        as it is (no layer of its own: an on-demand read of one key is on a task's path).
        """
        task = wire.task_key(request.task)
        keys = wire.unpack_keys(request.packed_keys, task.fq, "packed_keys") if (
            request.packed_keys) else None  # fmt: skip
        since = request.changes_since_batch if request.HasField("changes_since_batch") else None
        changes = since is not None or bool(request.since_version or request.delta_only)
        if keys is not None and changes:
            raise bad(f"task {task.fq}: a read of some keys reads no changes; ask for one")
        n = read.page_fields(request.max_fields)
        if request.epoch:
            if request.pattern or since is not None:
                raise bad(f"task {task.fq}: a read with an epoch takes no pattern and no batch")
            # a key over the limit cannot be stored: reading it finds it absent, as ever
            epoch = wire.epoch(request.epoch, task.fq)
            chunks = (
                read.fenced_keys(self.tasks, task, epoch, keys) if keys is not None
                else read.restore(
                    self.tasks, task, epoch, n, request.since_version, request.delta_only)
            )  # fmt: skip
        else:
            if request.since_version or request.delta_only:
                raise bad(f"task {task.fq}: reading changes since a version needs an epoch")
            if since is not None and not -1 <= since <= MAX_BATCH:
                raise bad(f"task {task.fq}: changes since batch {since} is out of range")
            if keys is not None:
                self.limits.check_entries(task.fq, keys, [], "read")
            chunks = read.claim_free(self.admin, task, n, request.pattern, keys, since)
        return chunks
