"""The storage interface behind the sidecar and the values it passes around.

Every backend implements the commit protocol of docs/architecture.md exactly:

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
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from taskstate.proto.durability import Durability
from taskstate.proto.ids import fq_task_id

LAYOUT_VERSION = 1


@dataclass(frozen=True, slots=True)
class TaskKey:
    """A validated task id."""

    namespace: str
    component: str
    partition: int

    @property
    def fq(self) -> str:
        """`namespace/component/partition`."""
        return fq_task_id(self.namespace, self.component, self.partition)


@dataclass(frozen=True, slots=True)
class OpenResult:
    """What `open` reports to the attempt that claimed the task."""

    epoch: int
    committed_batch: int
    position: bytes | None
    size: int
    version: str
    rolled_back: bool
    rolled_back_keys: int
    reused_claim: bool = False


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What `commit` reports."""

    version: str
    size: int
    replicas_acked: int = 0
    base_version: str = ""  # the version the change set was applied on


@dataclass(frozen=True, slots=True)
class Delta:
    """What changed between a version a worker holds and `version` (a delta restore)."""

    version: str
    upserts: list[tuple[str | bytes, bytes]]
    deletes: list[str | bytes]


# The change log keeps at most max(LOG_MIN, state size // LOG_FRACTION) keys (lua/commit.lua).
LOG_MIN = 4096
LOG_FRACTION = 8


@dataclass(frozen=True, slots=True)
class TaskMeta:
    """A task's metadata, as `describe` and `list` show it."""

    task: TaskKey
    exists: bool
    committed_batch: int = -1
    epoch: int = 0
    position: bytes | None = None
    size: int = 0
    version: str = ""
    codec: str = ""
    layout: int = 0
    updated_at: float = 0.0
    last_writer: str = ""
    rollbacks: int = 0
    # the component's recorded partition count (the task's own record, else the
    # component's); None: none recorded
    partitions: int | None = None
    rescaling: bool = False  # a rescale holds the task


@dataclass(frozen=True, slots=True)
class RescaleProgress:
    """One step of a rescale (`Storage.rescale`); `phase` "done" ends it with the totals."""

    phase: str  # plan, lock, copy, commit, retire, done
    done: int = 0
    total: int = 0
    from_partitions: int = 0
    to_partitions: int = 0
    keys: int = 0
    batch: int = -1
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class ServerReport:
    """One Redis server as `doctor` sees it."""

    address: str
    role: str
    version: str
    aof_enabled: bool
    appendfsync: str  # "?" when CONFIG GET is refused
    connected_replicas: int


@dataclass(frozen=True, slots=True)
class Check:
    """One `doctor` finding: ok, or what is wrong and what to do."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """What the sidecar sees of its store."""

    topology: str
    servers: list[ServerReport]
    checks: list[Check]


class Storage(Protocol):
    """A place that keeps task state with the taskstate commit protocol."""

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
    ) -> OpenResult:
        """Claim `task` for task attempt `attempt` (see module docstring).

        `attempt` is the attempt's identity; empty (an older client): always a new claim.
        `partitions`: the count the task declares (None: none). The first declared is
        recorded for the component; an Open under another, or by a partition outside
        it, or while a rescale holds the component, is refused (PARTITIONS).
        """
        ...

    def restore(
        self, task: TaskKey, epoch: int, max_fields: int
    ) -> AsyncIterator[Sequence[tuple[str | bytes, bytes]]]:
        """Yield the state in chunks of at most `max_fields` entries; fenced by epoch."""
        ...

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
        """Apply one change set atomically (see module docstring)."""
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
        """Read keys of the task (remote mode); fenced by epoch."""
        ...

    async def describe(self, task: TaskKey) -> TaskMeta:
        """The task's metadata (exists=False when it has none)."""
        ...

    async def list_tasks(self, namespace: str, component: str | None) -> list[TaskMeta]:
        """Every task of a namespace (optionally one component)."""
        ...

    async def drop(self, namespace: str, component: str | None, partition: int | None) -> int:
        """Delete tasks' state; returns how many tasks were dropped.

        The namespace stays known (a later streaming Open past batch 0 starts empty).
        """
        ...

    async def adopt(self, namespace: str) -> tuple[bool, int]:
        """Record the namespace as known: its query goes on from the batch it runs next.

        Returns (known before, tasks). See `open`: STATE_LOST for an unknown namespace.
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
        self, task: TaskKey, pattern: str | None, max_fields: int
    ) -> AsyncIterator[Sequence[tuple[str | bytes, bytes]]]:
        """Yield the committed state without a claim, all of one version (CHANGED if not).

        NOT_FOUND when the task has no state.
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

    async def namespaces(self) -> list[str]:
        """Every namespace that has tasks."""
        ...

    async def doctor(self, durability: Durability) -> DoctorReport:
        """The store's topology, servers and whether `durability` is possible there."""
        ...

    async def ping(self) -> None:
        """Raise when the store cannot be reached."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
