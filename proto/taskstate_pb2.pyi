from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Durability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABILITY_UNSPECIFIED: _ClassVar[Durability]
    DURABILITY_APPLIED: _ClassVar[Durability]
    DURABILITY_REPLICATED: _ClassVar[Durability]
    DURABILITY_FSYNCED: _ClassVar[Durability]
    DURABILITY_REPLICATED_FSYNCED: _ClassVar[Durability]
DURABILITY_UNSPECIFIED: Durability
DURABILITY_APPLIED: Durability
DURABILITY_REPLICATED: Durability
DURABILITY_FSYNCED: Durability
DURABILITY_REPLICATED_FSYNCED: Durability

class TaskId(_message.Message):
    __slots__ = ("namespace", "component", "partition")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    partition: int
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class Writer(_message.Message):
    __slots__ = ("host", "executor", "attempt", "pid")
    HOST_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    host: str
    executor: str
    attempt: int
    pid: int
    def __init__(self, host: _Optional[str] = ..., executor: _Optional[str] = ..., attempt: _Optional[int] = ..., pid: _Optional[int] = ...) -> None: ...

class OpenRequest(_message.Message):
    __slots__ = ("task", "batch", "writer", "codec", "durability", "replicas", "attempt_id", "partitions", "event_time_ms")
    TASK_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    task: TaskId
    batch: int
    writer: Writer
    codec: str
    durability: Durability
    replicas: int
    attempt_id: str
    partitions: int
    event_time_ms: int
    def __init__(self, task: _Optional[_Union[TaskId, _Mapping]] = ..., batch: _Optional[int] = ..., writer: _Optional[_Union[Writer, _Mapping]] = ..., codec: _Optional[str] = ..., durability: _Optional[_Union[Durability, str]] = ..., replicas: _Optional[int] = ..., attempt_id: _Optional[str] = ..., partitions: _Optional[int] = ..., event_time_ms: _Optional[int] = ...) -> None: ...

class OpenResponse(_message.Message):
    __slots__ = ("epoch", "committed_batch", "position", "has_position", "size", "version", "rolled_back", "rolled_back_keys", "reused_claim", "flush_barrier", "now_ms", "expired")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BATCH_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HAS_POSITION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_KEYS_FIELD_NUMBER: _ClassVar[int]
    REUSED_CLAIM_FIELD_NUMBER: _ClassVar[int]
    FLUSH_BARRIER_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    committed_batch: int
    position: bytes
    has_position: bool
    size: int
    version: str
    rolled_back: bool
    rolled_back_keys: int
    reused_claim: bool
    flush_barrier: bool
    now_ms: int
    expired: int
    def __init__(self, epoch: _Optional[int] = ..., committed_batch: _Optional[int] = ..., position: _Optional[bytes] = ..., has_position: _Optional[bool] = ..., size: _Optional[int] = ..., version: _Optional[str] = ..., rolled_back: _Optional[bool] = ..., rolled_back_keys: _Optional[int] = ..., reused_claim: _Optional[bool] = ..., flush_barrier: _Optional[bool] = ..., now_ms: _Optional[int] = ..., expired: _Optional[int] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class ReadChunk(_message.Message):
    __slots__ = ("last", "version", "packed", "delta", "packed_deletes", "not_covered", "committed_batch")
    LAST_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    PACKED_DELETES_FIELD_NUMBER: _ClassVar[int]
    NOT_COVERED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BATCH_FIELD_NUMBER: _ClassVar[int]
    last: bool
    version: str
    packed: bytes
    delta: bool
    packed_deletes: bytes
    not_covered: bool
    committed_batch: int
    def __init__(self, last: _Optional[bool] = ..., version: _Optional[str] = ..., packed: _Optional[bytes] = ..., delta: _Optional[bool] = ..., packed_deletes: _Optional[bytes] = ..., not_covered: _Optional[bool] = ..., committed_batch: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("task", "epoch", "batch", "position", "has_position", "durability", "replicas", "writer", "packed_upserts", "packed_deletes")
    TASK_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HAS_POSITION_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    PACKED_UPSERTS_FIELD_NUMBER: _ClassVar[int]
    PACKED_DELETES_FIELD_NUMBER: _ClassVar[int]
    task: TaskId
    epoch: int
    batch: int
    position: bytes
    has_position: bool
    durability: Durability
    replicas: int
    writer: Writer
    packed_upserts: bytes
    packed_deletes: bytes
    def __init__(self, task: _Optional[_Union[TaskId, _Mapping]] = ..., epoch: _Optional[int] = ..., batch: _Optional[int] = ..., position: _Optional[bytes] = ..., has_position: _Optional[bool] = ..., durability: _Optional[_Union[Durability, str]] = ..., replicas: _Optional[int] = ..., writer: _Optional[_Union[Writer, _Mapping]] = ..., packed_upserts: _Optional[bytes] = ..., packed_deletes: _Optional[bytes] = ...) -> None: ...

class OpenCommitRequest(_message.Message):
    __slots__ = ("open", "commit")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    open: OpenRequest
    commit: CommitRequest
    def __init__(self, open: _Optional[_Union[OpenRequest, _Mapping]] = ..., commit: _Optional[_Union[CommitRequest, _Mapping]] = ...) -> None: ...

class OpenCommitResponse(_message.Message):
    __slots__ = ("open", "commit")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    open: OpenResponse
    commit: CommitResponse
    def __init__(self, open: _Optional[_Union[OpenResponse, _Mapping]] = ..., commit: _Optional[_Union[CommitResponse, _Mapping]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("version", "size", "replicas_acked", "base_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_ACKED_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    size: int
    replicas_acked: int
    base_version: str
    def __init__(self, version: _Optional[str] = ..., size: _Optional[int] = ..., replicas_acked: _Optional[int] = ..., base_version: _Optional[str] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: TaskId
    def __init__(self, task: _Optional[_Union[TaskId, _Mapping]] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("task", "exists", "committed_batch", "epoch", "position", "has_position", "size", "version", "codec", "layout", "updated_at", "last_writer", "rollbacks", "partitions", "rescaling")
    TASK_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BATCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HAS_POSITION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_WRITER_FIELD_NUMBER: _ClassVar[int]
    ROLLBACKS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RESCALING_FIELD_NUMBER: _ClassVar[int]
    task: TaskId
    exists: bool
    committed_batch: int
    epoch: int
    position: bytes
    has_position: bool
    size: int
    version: str
    codec: str
    layout: int
    updated_at: float
    last_writer: str
    rollbacks: int
    partitions: int
    rescaling: bool
    def __init__(self, task: _Optional[_Union[TaskId, _Mapping]] = ..., exists: _Optional[bool] = ..., committed_batch: _Optional[int] = ..., epoch: _Optional[int] = ..., position: _Optional[bytes] = ..., has_position: _Optional[bool] = ..., size: _Optional[int] = ..., version: _Optional[str] = ..., codec: _Optional[str] = ..., layout: _Optional[int] = ..., updated_at: _Optional[float] = ..., last_writer: _Optional[str] = ..., rollbacks: _Optional[int] = ..., partitions: _Optional[int] = ..., rescaling: _Optional[bool] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("namespace", "component")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("tasks", "namespaces")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ..., namespaces: _Optional[_Iterable[str]] = ...) -> None: ...

class DropRequest(_message.Message):
    __slots__ = ("namespace", "component", "partition")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    partition: int
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class DropResponse(_message.Message):
    __slots__ = ("tasks_dropped",)
    TASKS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    tasks_dropped: int
    def __init__(self, tasks_dropped: _Optional[int] = ...) -> None: ...

class AdoptRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class RescaleRequest(_message.Message):
    __slots__ = ("namespace", "component", "to", "key_type", "quiet_seconds")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUIET_SECONDS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    to: int
    key_type: str
    quiet_seconds: float
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., to: _Optional[int] = ..., key_type: _Optional[str] = ..., quiet_seconds: _Optional[float] = ...) -> None: ...

class RescaleProgress(_message.Message):
    __slots__ = ("phase", "done", "total", "from_partitions", "to_partitions", "keys", "batch", "resumed")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    FROM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TO_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    phase: str
    done: int
    total: int
    from_partitions: int
    to_partitions: int
    keys: int
    batch: int
    resumed: bool
    def __init__(self, phase: _Optional[str] = ..., done: _Optional[int] = ..., total: _Optional[int] = ..., from_partitions: _Optional[int] = ..., to_partitions: _Optional[int] = ..., keys: _Optional[int] = ..., batch: _Optional[int] = ..., resumed: _Optional[bool] = ...) -> None: ...

class EditRequest(_message.Message):
    __slots__ = ("namespace", "component", "partition", "key", "value", "delete", "codec")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    partition: int
    key: str
    value: bytes
    delete: bool
    codec: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., partition: _Optional[int] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ..., delete: _Optional[bool] = ..., codec: _Optional[str] = ...) -> None: ...

class EditResponse(_message.Message):
    __slots__ = ("tasks", "had_key")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    HAD_KEY_FIELD_NUMBER: _ClassVar[int]
    tasks: int
    had_key: int
    def __init__(self, tasks: _Optional[int] = ..., had_key: _Optional[int] = ...) -> None: ...

class AdoptResponse(_message.Message):
    __slots__ = ("known_before", "tasks")
    KNOWN_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    known_before: bool
    tasks: int
    def __init__(self, known_before: _Optional[bool] = ..., tasks: _Optional[int] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("task", "pattern", "max_fields", "changes_since_batch", "epoch", "packed_keys", "since_version", "delta_only")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELDS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_SINCE_BATCH_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PACKED_KEYS_FIELD_NUMBER: _ClassVar[int]
    SINCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DELTA_ONLY_FIELD_NUMBER: _ClassVar[int]
    task: TaskId
    pattern: str
    max_fields: int
    changes_since_batch: int
    epoch: int
    packed_keys: bytes
    since_version: str
    delta_only: bool
    def __init__(self, task: _Optional[_Union[TaskId, _Mapping]] = ..., pattern: _Optional[str] = ..., max_fields: _Optional[int] = ..., changes_since_batch: _Optional[int] = ..., epoch: _Optional[int] = ..., packed_keys: _Optional[bytes] = ..., since_version: _Optional[str] = ..., delta_only: _Optional[bool] = ...) -> None: ...

class SeedBeginRequest(_message.Message):
    __slots__ = ("namespace", "component", "partitions", "overwrite", "batch", "key_type", "quiet_seconds", "lease_seconds")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    QUIET_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    partitions: int
    overwrite: bool
    batch: int
    key_type: str
    quiet_seconds: float
    lease_seconds: float
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., partitions: _Optional[int] = ..., overwrite: _Optional[bool] = ..., batch: _Optional[int] = ..., key_type: _Optional[str] = ..., quiet_seconds: _Optional[float] = ..., lease_seconds: _Optional[float] = ...) -> None: ...

class SeedBeginResponse(_message.Message):
    __slots__ = ("seed_id", "settled", "batch")
    SEED_ID_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    seed_id: str
    settled: _containers.RepeatedScalarFieldContainer[str]
    batch: int
    def __init__(self, seed_id: _Optional[str] = ..., settled: _Optional[_Iterable[str]] = ..., batch: _Optional[int] = ...) -> None: ...

class SeedStageRequest(_message.Message):
    __slots__ = ("namespace", "component", "seed_id", "source", "attempt", "packed")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    SEED_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    seed_id: str
    source: int
    attempt: int
    packed: bytes
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., seed_id: _Optional[str] = ..., source: _Optional[int] = ..., attempt: _Optional[int] = ..., packed: _Optional[bytes] = ...) -> None: ...

class SeedStageResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: int
    def __init__(self, keys: _Optional[int] = ...) -> None: ...

class SeedSource(_message.Message):
    __slots__ = ("source", "attempt", "keys")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    source: int
    attempt: int
    keys: int
    def __init__(self, source: _Optional[int] = ..., attempt: _Optional[int] = ..., keys: _Optional[int] = ...) -> None: ...

class SeedCommitRequest(_message.Message):
    __slots__ = ("namespace", "component", "seed_id", "sources")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    SEED_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    seed_id: str
    sources: _containers.RepeatedCompositeFieldContainer[SeedSource]
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., seed_id: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[SeedSource, _Mapping]]] = ...) -> None: ...

class SeedCommitResponse(_message.Message):
    __slots__ = ("tasks", "keys", "batch")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    tasks: int
    keys: int
    batch: int
    def __init__(self, tasks: _Optional[int] = ..., keys: _Optional[int] = ..., batch: _Optional[int] = ...) -> None: ...

class SeedAbortRequest(_message.Message):
    __slots__ = ("namespace", "component", "seed_id")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    SEED_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    seed_id: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., seed_id: _Optional[str] = ...) -> None: ...

class SeedAbortResponse(_message.Message):
    __slots__ = ("undone",)
    UNDONE_FIELD_NUMBER: _ClassVar[int]
    undone: bool
    def __init__(self, undone: _Optional[bool] = ...) -> None: ...

class SweepRequest(_message.Message):
    __slots__ = ("namespace", "component", "idle_seconds")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    idle_seconds: float
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ..., idle_seconds: _Optional[float] = ...) -> None: ...

class SweepResponse(_message.Message):
    __slots__ = ("tasks", "keys")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    tasks: int
    keys: int
    def __init__(self, tasks: _Optional[int] = ..., keys: _Optional[int] = ...) -> None: ...

class SettleRequest(_message.Message):
    __slots__ = ("namespace", "component")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    component: str
    def __init__(self, namespace: _Optional[str] = ..., component: _Optional[str] = ...) -> None: ...

class SettleResponse(_message.Message):
    __slots__ = ("settled",)
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    settled: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, settled: _Optional[_Iterable[str]] = ...) -> None: ...

class ImportRequest(_message.Message):
    __slots__ = ("task", "entries", "committed_batch", "position", "has_position", "codec", "replace", "append", "epoch", "partitions")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_BATCH_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    HAS_POSITION_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    task: TaskId
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    committed_batch: int
    position: bytes
    has_position: bool
    codec: str
    replace: bool
    append: bool
    epoch: int
    partitions: int
    def __init__(self, task: _Optional[_Union[TaskId, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., committed_batch: _Optional[int] = ..., position: _Optional[bytes] = ..., has_position: _Optional[bool] = ..., codec: _Optional[str] = ..., replace: _Optional[bool] = ..., append: _Optional[bool] = ..., epoch: _Optional[int] = ..., partitions: _Optional[int] = ...) -> None: ...

class ImportResponse(_message.Message):
    __slots__ = ("epoch", "size")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    size: int
    def __init__(self, epoch: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class DoctorRequest(_message.Message):
    __slots__ = ("durability", "replicas")
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    durability: Durability
    replicas: int
    def __init__(self, durability: _Optional[_Union[Durability, str]] = ..., replicas: _Optional[int] = ...) -> None: ...

class ServerReport(_message.Message):
    __slots__ = ("address", "role", "version", "aof_enabled", "appendfsync", "connected_replicas")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    AOF_ENABLED_FIELD_NUMBER: _ClassVar[int]
    APPENDFSYNC_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    address: str
    role: str
    version: str
    aof_enabled: bool
    appendfsync: str
    connected_replicas: int
    def __init__(self, address: _Optional[str] = ..., role: _Optional[str] = ..., version: _Optional[str] = ..., aof_enabled: _Optional[bool] = ..., appendfsync: _Optional[str] = ..., connected_replicas: _Optional[int] = ...) -> None: ...

class Check(_message.Message):
    __slots__ = ("name", "ok", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    ok: bool
    detail: str
    def __init__(self, name: _Optional[str] = ..., ok: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class DoctorResponse(_message.Message):
    __slots__ = ("topology", "redis_url", "servers", "checks")
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    REDIS_URL_FIELD_NUMBER: _ClassVar[int]
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    topology: str
    redis_url: str
    servers: _containers.RepeatedCompositeFieldContainer[ServerReport]
    checks: _containers.RepeatedCompositeFieldContainer[Check]
    def __init__(self, topology: _Optional[str] = ..., redis_url: _Optional[str] = ..., servers: _Optional[_Iterable[_Union[ServerReport, _Mapping]]] = ..., checks: _Optional[_Iterable[_Union[Check, _Mapping]]] = ...) -> None: ...

class AttachMessage(_message.Message):
    __slots__ = ("hello", "defer", "flushed", "handover")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    DEFER_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_FIELD_NUMBER: _ClassVar[int]
    HANDOVER_FIELD_NUMBER: _ClassVar[int]
    hello: AttachHello
    defer: DeferRequest
    flushed: FlushResult
    handover: HandOver
    def __init__(self, hello: _Optional[_Union[AttachHello, _Mapping]] = ..., defer: _Optional[_Union[DeferRequest, _Mapping]] = ..., flushed: _Optional[_Union[FlushResult, _Mapping]] = ..., handover: _Optional[_Union[HandOver, _Mapping]] = ...) -> None: ...

class HandOver(_message.Message):
    __slots__ = ("task_attempt", "commit")
    TASK_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    task_attempt: int
    commit: CommitRequest
    def __init__(self, task_attempt: _Optional[int] = ..., commit: _Optional[_Union[CommitRequest, _Mapping]] = ...) -> None: ...

class AttachHello(_message.Message):
    __slots__ = ("pid", "held")
    PID_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    pid: int
    held: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pid: _Optional[int] = ..., held: _Optional[_Iterable[int]] = ...) -> None: ...

class DeferRequest(_message.Message):
    __slots__ = ("request_id", "task_attempt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    task_attempt: int
    def __init__(self, request_id: _Optional[int] = ..., task_attempt: _Optional[int] = ...) -> None: ...

class FlushResult(_message.Message):
    __slots__ = ("task_attempt", "ok", "error", "keys", "handed_over")
    TASK_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    HANDED_OVER_FIELD_NUMBER: _ClassVar[int]
    task_attempt: int
    ok: bool
    error: str
    keys: int
    handed_over: int
    def __init__(self, task_attempt: _Optional[int] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ..., keys: _Optional[int] = ..., handed_over: _Optional[int] = ...) -> None: ...

class AttachOrder(_message.Message):
    __slots__ = ("kind", "task_attempt", "request_id", "worker", "adopted")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ATTACHED: _ClassVar[AttachOrder.Kind]
        DEFERRED: _ClassVar[AttachOrder.Kind]
        FLUSH: _ClassVar[AttachOrder.Kind]
        DISCARD: _ClassVar[AttachOrder.Kind]
    ATTACHED: AttachOrder.Kind
    DEFERRED: AttachOrder.Kind
    FLUSH: AttachOrder.Kind
    DISCARD: AttachOrder.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    TASK_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    kind: AttachOrder.Kind
    task_attempt: int
    request_id: int
    worker: str
    adopted: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kind: _Optional[_Union[AttachOrder.Kind, str]] = ..., task_attempt: _Optional[int] = ..., request_id: _Optional[int] = ..., worker: _Optional[str] = ..., adopted: _Optional[_Iterable[int]] = ...) -> None: ...
