"""The values the sidecar's storage takes and gives: task ids, results, metadata, reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
class ChangeSet:
    """One commit's changes: absolute values to set, keys to delete (checked, disjoint).

    `nbytes`: their size as the request carried them (for the metrics).
    """

    upserts: Sequence[tuple[str, bytes]]
    deletes: Sequence[str]
    nbytes: int = 0

    def __len__(self) -> int:
        return len(self.upserts) + len(self.deletes)


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
