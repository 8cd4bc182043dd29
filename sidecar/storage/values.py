"""The values the sidecar's storage takes and gives: task ids, results, metadata, reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from taskstate.proto import chunks
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
    now_ms: int = 0  # the batch's now (epoch ms): what expiry is measured against
    expired: int = 0  # keys this Open found expired (and deleted, as a write of the batch)


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What `commit` reports."""

    version: str
    size: int
    replicas_acked: int = 0
    base_version: str = ""  # the version the change set was applied on


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """One commit's changes, checked: absolute values to set, keys to delete (disjoint).

    `packed_upserts` (pairs) and `packed_deletes` (keys) as `taskstate.proto.chunks` packs
    them: the form the commit script reads as it is, so a client's blob goes to Redis as
    it came. `keys`: the upserted keys, then the deleted ones (the change
    log's entry); `nbytes`: the change set's size as the request carried it.
    """

    keys: Sequence[str]
    n_upserts: int
    packed_upserts: bytes
    packed_deletes: bytes
    nbytes: int = 0

    @classmethod
    def of(cls, upserts: Sequence[tuple[str, bytes]], deletes: Sequence[str]) -> ChangeSet:
        """A change set from pairs and keys (tests that call a store directly)."""
        flat = [x for kv in upserts for x in kv]
        keys = [k for k, _ in upserts]
        keys += deletes
        return cls(
            keys,
            len(upserts),
            chunks.pack(flat),
            chunks.pack(deletes),
            sum(len(k) + len(v) for k, v in upserts) + sum(map(len, deletes)),
        )

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True, slots=True)
class Delta:
    """What changed between a version a worker holds and `version` (a delta restore)."""

    version: str
    upserts: list[tuple[str | bytes, bytes]]
    deletes: list[str | bytes]


@dataclass(frozen=True, slots=True)
class ReadPage:
    """One page of a claim-free read (`AdminStore.read`); the last one says what was read.

    `items`: keys with their values now; `deletes`: keys deleted (a read of the changes
    since a batch). The last page (`last`) carries no keys: the version read and its
    committed batch, the same for every page before it.
    """

    items: Sequence[tuple[str | bytes, bytes]] = ()
    deletes: Sequence[str | bytes] = ()
    last: bool = False
    # the keys and values as one flat list [key1, value1, ...] (a whole read's pages, as
    # Redis sends them), instead of `items`
    flat: Sequence[bytes] = ()
    version: str = ""
    batch: int = -1


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
class SeedSpec:
    """A write of the data source, as its driver asks for it (SeedBeginRequest)."""

    namespace: str
    component: str
    to: int  # the partition count the keys are placed by
    key_type: str  # spark_hash's name of the key column's type
    overwrite: bool = False
    batch: int | None = None  # None: -1, or the component's own batch when adding to it
    quiet_s: float = 30.0
    lease_s: float = 60.0


@dataclass(frozen=True, slots=True)
class SeedStarted:
    """A write begun: its id, the batch it will record, what was done to an earlier one."""

    seed_id: str
    batch: int
    settled: list[str]


@dataclass(frozen=True, slots=True)
class SeedDone:
    """A write made visible: its tasks, the component's keys after it, their batch."""

    tasks: int
    keys: int
    batch: int


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
