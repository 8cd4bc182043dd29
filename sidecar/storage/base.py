"""The storage behind the sidecar: two small protocols, for two audiences, and a backend.

`TaskStore` is what a Spark task's calls need, and every backend implements the commit
protocol of docs/concepts/commit-protocol.md exactly:

- `open` claims the task for a task attempt (fencing epoch + 1), rolls back a replayed
  batch (the state's last written batch equals the opening batch) and refuses a state
  that is ahead, and state that Redis lost (STATE_LOST: half a task, an indexed task
  with no keys, or a streaming task past batch 0 in a namespace Redis has no record
  of; `adopt` records one on purpose). The claim belongs to the attempt, not to a
  process: the attempt that holds it opening again at the same batch (a second Python
  worker serving it) shares it (same epoch, nothing rolled back); an attempt displaced
  by another is fenced.
- `commit` applies one change set atomically when the epoch is current; the first commit
  of a new batch starts a new rollback record; upserts are absolute so a retry is
  idempotent.
- `restore` yields the state in bounded chunks.
- `changes_since` answers a delta restore: what changed since a version a worker holds,
  from the task's change log, or None when the log does not cover that version.

`AdminStore` is what operators' calls need (`taskstate ls/show/export/import/...`); none
of them claims a task. `SeedStore` is the data source's writes. A `Backend` has one of
each over one connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from taskstate.proto.durability import Durability

from .values import (
    ChangeSet,
    CommitResult,
    Delta,
    DoctorReport,
    OpenResult,
    ReadPage,
    RescaleProgress,
    SeedDone,
    SeedSpec,
    SeedStarted,
    TaskKey,
    TaskMeta,
)


class TaskStore(Protocol):
    """A task's state under the taskstate commit protocol (the calls of Spark tasks)."""

    async def open(
        self,
        task: TaskKey,
        batch: int | None,
        *,
        codec: str,
        writer: str,
        durability: Durability,
        attempt: str = "",
        partitions: int | None = None,
        event_time_ms: int | None = None,
    ) -> OpenResult:
        """Claim `task` for task attempt `attempt` (see module docstring).

        `attempt` is the attempt's identity; empty (no Spark task): always a new claim.
        `partitions`: the count the task declares (None: none). The first declared is
        recorded for the component; an Open under another, or by a partition outside
        it, or while a rescale holds the component, is refused (PARTITIONS).
        `event_time_ms`: the block's event time (None: processing time). The batch's now
        is fixed at its first claim (the event time, or the clock) and kept for a replay;
        that claim deletes the keys expired by then, as a write of the batch (a replay
        rolls them back and expires them again). A component that used event time refuses
        a claim without one (CONFIG).
        """
        ...

    async def mark_done(self, task: TaskKey, batch: int, attempt: str) -> bool:
        """Record that `attempt` finished `batch` of `task` (the executor plugin's flush).

        True when the attempt still holds the claim at that batch; False (nothing
        written) when another attempt claimed the task since, so that this one must not
        be reported done. Once marked, another attempt of the same application that
        rolls the batch back keeps the finished state aside first; the first claim of a
        later batch restores it unless an attempt finished the batch again (lua/open.lua).
        """
        ...

    def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[str | bytes]]:
        """Yield the state in flat pages of about `max_fields` entries; fenced by epoch.

        Each page as Redis sends it: [key1, value1, key2, value2, ...] (values bytes).
        """
        ...

    async def commit(
        self,
        task: TaskKey,
        epoch: int,
        batch: int | None,
        changes: ChangeSet,
        position: bytes | None,
        *,
        writer: str,
        durability: Durability,
    ) -> CommitResult:
        """Apply one change set atomically (see module docstring)."""
        ...

    async def open_commit(
        self,
        task: TaskKey,
        batch: int | None,
        changes: ChangeSet,
        *,
        codec: str,
        writer: str,
        durability: Durability,
        attempt: str = "",
        partitions: int | None = None,
        event_time_ms: int | None = None,
    ) -> tuple[OpenResult, CommitResult]:
        """`open`, then `commit` of `changes` (no position) under the epoch it gave.

        Atomic in Redis (one script); the refusals and effects are the two calls'.
        """
        ...

    async def changes_since(
        self, task: TaskKey, epoch: int, since: str, max_keys: int
    ) -> Delta | None:
        """The keys changed since version `since`, with their values now; fenced by epoch.

        None when the change log does not cover `since` (another generation, trimmed
        past it) or more than `max_keys` keys changed: the caller restores in full.
        """
        ...

    async def version(self, task: TaskKey) -> str:
        """The version token of the task's committed content (`generation:counter`)."""
        ...

    async def get(self, task: TaskKey, epoch: int, keys: Sequence[str]) -> list[bytes | None]:
        """Read keys of the task (remote mode, on-demand reads); fenced by epoch."""
        ...

    async def describe(self, task: TaskKey) -> TaskMeta:
        """The task's metadata (exists=False when it has none)."""
        ...


class AdminStore(Protocol):
    """Operators' calls on stored state (the `taskstate` CLI); none claims a task."""

    async def list_tasks(self, namespace: str, component: str | None) -> list[TaskMeta]:
        """Every task of a namespace (optionally one component)."""
        ...

    async def namespaces(self) -> list[str]:
        """Every namespace that has tasks."""
        ...

    async def drop(self, namespace: str, component: str | None, partition: int | None) -> int:
        """Delete tasks' state; returns how many tasks were dropped.

        The namespace stays known (a later streaming Open past batch 0 starts empty).
        """
        ...

    async def adopt(self, namespace: str) -> tuple[bool, int]:
        """Record the namespace as known: its query goes on from the batch it runs next.

        Returns (known before, tasks). See `TaskStore.open`: STATE_LOST for an unknown
        namespace.
        """
        ...

    def rescale(
        self, namespace: str, component: str, to: int, key_type: str, quiet_s: float
    ) -> AsyncIterator[RescaleProgress]:
        """Move every key of the component to `partition_of(key, to, key_type)`.

        Refused (CHANGED) while a task was written in the last `quiet_s` seconds.
        Resumable: a rescale under way (its plan is recorded) is finished by the next
        call with the same `to` and `key_type`. Keeps the committed batch and the
        rollback record of that batch, moved key by key. Ends with a "done" step.
        """
        ...

    async def edit(self, task: TaskKey, key: str, value: bytes | None, codec: str) -> bool:
        """An operator's edit: set `key` to `value` (None: delete it); whether it existed.

        Applied at once, and again at the task's first Open of a later batch, so that
        neither a replay of the batch in flight nor that batch's own commits undo it. A
        delete also removes the key from the rollback record. NOT_FOUND for no task,
        PARTITIONS while a rescale holds it, CODEC when the task uses another codec.
        """
        ...

    def read(
        self,
        task: TaskKey,
        max_fields: int,
        *,
        pattern: str | None = None,
        keys: Sequence[str] | None = None,
        since_batch: int | None = None,
    ) -> AsyncIterator[ReadPage]:
        """The committed state without a claim, all of one version, in pages.

        Pages hold at most `max_fields` keys; the last names the version and its committed
        batch. Every key (matching `pattern`); only `keys` (those present, one atomic read); or
        the keys changed after committed batch `since_batch`, from the change log, with
        the deleted ones (NOT_FOUND naming the oldest batch it covers when it does not
        reach back that far). CHANGED when a commit lands during a whole read; NOT_FOUND
        when the task has no state; PARTITIONS while a rescale or a write holds it.
        """
        ...

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
        partitions: int | None = None,
    ) -> tuple[int, int]:
        """Create (or with `append_epoch`, extend) a task from exported state: (epoch, size).

        ALREADY_EXISTS when the task exists and `replace` is false. `partitions`: the
        component's count as exported, recorded with the task and for the component
        (None: the component's recorded count, if any, applies). PARTITIONS when the
        component has another count, or the task's partition is outside it; nothing is
        written then.
        """
        ...

    async def doctor(self, durability: Durability) -> DoctorReport:
        """The store's topology, servers and whether `durability` is possible there."""
        ...

    async def sweep(self, task: TaskKey, idle_s: float) -> int:
        """Delete the task's keys whose time to live ran out by the clock; how many.

        Only a task opened and written no more recently than `idle_s` seconds ago, in
        processing time. Its last batch takes the sweep's time as its now (a replay of it
        finds these keys expired too). A version in the change log.
        """
        ...


class SeedStore(Protocol):
    """Writes of the data source (`df.write.format("taskstate")`): all or nothing.

    `begin` holds the component (refused while its query runs, or a rescale or another
    write holds it) and records the plan; `stage` takes pages of keys from the write's
    Spark tasks, invisible until `commit` makes all of them the component's state (a key
    written twice: INVALID_ARGUMENT, and nothing is written); `abort` undoes. A write that
    no call reached within its lease is abandoned: `settle` undoes it (or finishes it,
    once committed) and says which. Open runs `settle` for its component too.
    """

    async def begin(self, spec: SeedSpec) -> SeedStarted:
        """Hold the component and record the write."""
        ...

    async def stage(
        self, namespace: str, component: str, seed_id: str, source: int, attempt: int,
        flat: Sequence[str],
    ) -> int:  # fmt: skip
        """Stage a page of Spark task `source`: [key1, value1, key2, ...] (values: JSON)."""
        ...

    async def commit(
        self, namespace: str, component: str, seed_id: str, sources: dict[int, int]
    ) -> SeedDone:
        """Make the write visible; `sources`: the attempt of each Spark task that counts."""
        ...

    async def abort(self, namespace: str, component: str, seed_id: str) -> bool:
        """Undo the write; False when it was not under way (or had been committed)."""
        ...

    async def settle(self, namespace: str, component: str | None) -> list[str]:
        """Finish or undo abandoned writes of the namespace; what was done, one line each."""
        ...


class Backend(Protocol):
    """One store of task state: its task calls and its operator calls, one connection."""

    @property
    def tasks(self) -> TaskStore:
        """The task protocol."""
        ...

    @property
    def admin(self) -> AdminStore:
        """The operators' calls."""
        ...

    @property
    def seeds(self) -> SeedStore:
        """Writes of the data source."""
        ...

    async def ping(self) -> None:
        """Raise when the store cannot be reached."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
