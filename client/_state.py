"""TaskState: a task's state as a MutableMapping, restored on enter, committed on exit.

Life cycle (one object, one `with` block)::

    CREATED --enter--> OPEN --exit ok--> CLOSED      (changes committed)
                            --exit exc--> FAILED      (changes discarded, exception re-raised)
                            --commit()--> OPEN        (a checkpoint; the block goes on)

Claims are per task attempt, not per process: the first block of an attempt Opens the
task (new fencing epoch, rollback of a replayed batch); later blocks of the same attempt
in the same process (one per group in applyInPandasWithState) reuse that claim without a
round trip, each committing its own changes; a block of the same attempt in another
Python process (Spark runs applyInPandasWithState's timed-out groups in a second worker)
Opens again and the sidecar hands it the same claim: same epoch, nothing rolled back. A
process that already holds the committed version skips Restore.
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Iterator, MutableMapping
from dataclasses import replace
from typing import Any, Literal

import orjson

from taskstate.proto import taskstate_pb2 as pb

from ._cache import remember, sessions
from ._changes import MISSING, REENCODE, SCALARS, Changes, is_mutable
from ._codec import CODECS, JsonCodec
from ._config import TaskStateConfig
from ._context import current_context, identity
from ._errors import ConfigError, LimitError, TaskStateError
from ._session import OpenInfo, Session
from ._transport import GrpcTransport
from ._wire import ENTRY_OVERHEAD, REQUEST_HEADROOM, decode_chunk, pieces, unpack_keys

_DURABILITY = {
    (False, False): pb.DURABILITY_APPLIED,
    (True, False): pb.DURABILITY_REPLICATED,
    (False, True): pb.DURABILITY_FSYNCED,
    (True, True): pb.DURABILITY_REPLICATED_FSYNCED,
}


class Phase(enum.Enum):
    """Where a TaskState is in its life cycle."""

    CREATED = "created"
    OPEN = "open"
    CLOSED = "closed"
    FAILED = "failed"


class TaskState(MutableMapping[str, Any]):
    """A Spark task's state: a MutableMapping of JSON values that survives crashes.

    Example::

        with TaskState(TaskContext.get(), component="hashtag-ewma") as s:
            s["#spark"] = {"rate": 1.7, "last": 12}

    Enter = Open + Restore; exit without exception = Commit of what changed; exit with
    an exception = nothing committed, in-memory changes discarded, exception re-raised.
    A nested value changed in place (``s["k"]["n"] += 1``) is detected and committed.

    Args:
        ctx: the task context; defaults to `pyspark.TaskContext.get()`. Outside Spark,
            pass `LocalContext(partition_id, batch_id)`.
        component: the operator's stable name (Storm's componentId).
        namespace: the job's stable name; else `TASKSTATE_NAMESPACE`; else the value set
            by `taskstate.spark_plugin.configure`; else ConfigError.
        sidecar: `unix:///PATH` or `tcp://HOST:PORT`; else `TASKSTATE_SIDECAR`; else
            `unix:///tmp/taskstate-run/sidecar.sock`.
        mode: `mirror` (state in task memory, double-written) or `remote` (reads go
            through the sidecar).
        durability: `applied`, `replicated:N`, `fsynced` or `replicated:N,fsynced`.
        codec: `json`.

    Resume contract: `position` is the value passed to the last successful `commit()`
    of the committed state; a resumed task continues *after* that position.
    """

    def __init__(
        self,
        ctx: Any = None,
        *,
        component: str,
        namespace: str | None = None,
        sidecar: str | None = None,
        mode: str = "mirror",
        durability: str = "applied",
        codec: str = "json",
    ) -> None:
        self._ctx = current_context(ctx)
        self._ident = identity(self._ctx)
        self.config = TaskStateConfig.resolve(
            component=component,
            namespace=namespace,
            sidecar=sidecar,
            mode=mode,
            durability=durability,
            codec=codec,
            local_property=lambda key: self._ctx.getLocalProperty(key),
        )
        c = self.config
        self.task_id = f"{c.namespace}/{c.component}/{self._ident.partition}"
        self._codec: JsonCodec = CODECS[c.codec]
        self._json = type(self._codec) is JsonCodec  # the scalar fast path in __setitem__
        self._transport = GrpcTransport(
            c.target,
            timeout_s=c.timeout_s,
            retry_deadline_s=c.retry_deadline_s,
            max_message_bytes=c.max_message_bytes,
            security=c.security,
        )
        self.phase = Phase.CREATED
        self._session: Session | None = None
        self._data: dict[str, Any] = {}
        self._absent: set[str] = set()  # remote mode: keys known not to exist
        self._changes = Changes(self.task_id, self._codec)
        self._written = self._changes.written  # the hot paths below skip an attribute
        self._snap = self._changes.snap

    # -- identity -------------------------------------------------------------

    @property
    def batch_id(self) -> int | None:
        """The micro-batch this block runs in (None in a batch job)."""
        return self._ident.batch

    @property
    def partition(self) -> int:
        """The task's partition id."""
        return self._ident.partition

    @property
    def info(self) -> OpenInfo:
        """What entering found (after `__enter__`)."""
        return self._require_session().info

    @property
    def position(self) -> Any:
        """The resume position committed with the state (decoded), or None."""
        s = self._require_session()
        if s.position is None:
            return None
        return self._codec.decode(self.task_id, "<position>", s.position)

    def _pb_task(self) -> pb.TaskId:
        c = self.config
        return pb.TaskId(
            namespace=c.namespace, component=c.component, partition=self._ident.partition
        )

    def _writer(self) -> pb.Writer:
        return pb.Writer(
            host=socket.gethostname(),
            executor=os.environ.get("SPARK_EXECUTOR_ID", ""),
            attempt=self._ident.attempt,
            pid=os.getpid(),
        )

    def _require_session(self) -> Session:
        if self._session is None:
            raise TaskStateError(
                f"task {self.task_id}: the state is not open; use `with TaskState(...) as s:`",
                self.task_id,
            )
        return self._session

    def _require_open(self) -> Session:
        if self.phase is not Phase.OPEN:
            raise TaskStateError(
                f"task {self.task_id}: the state is {self.phase.value}; read and write it "
                "inside its `with` block",
                self.task_id,
            )
        return self._require_session()

    # -- enter / exit -----------------------------------------------------------

    def __enter__(self) -> TaskState:
        if self.phase is not Phase.CREATED:
            raise TaskStateError(
                f"task {self.task_id}: a TaskState is entered once; create a new one",
                self.task_id,
            )
        prior = sessions.get(self.task_id)
        if prior is not None and prior.pid != os.getpid():
            prior = None
        if prior is not None and prior.active:
            raise ConfigError(
                f"task {self.task_id}: already open in this process; nested `with TaskState` "
                "blocks for the same component and partition are not allowed",
                self.task_id,
            )
        same_attempt = (
            prior is not None
            and prior.attempt_id == self._ident.attempt_id
            and prior.batch == self._ident.batch
        )
        if same_attempt:
            assert prior is not None  # noqa: S101 - narrowed above
            session = prior
            session.info = replace(session.info, reused_claim=True, restored=False)
            if self.config.mode == "mirror" and session.data is None:
                self._restore(session)
        else:
            session = self._open(prior)
        session.active = True
        remember(self.task_id, session, self.config.cache_tasks, self.config.cache_bytes)
        self._session = session
        self._data = session.data if session.data is not None else {}
        self.phase = Phase.OPEN
        return self

    def _open(self, prior: Session | None) -> Session:
        c = self.config
        req = pb.OpenRequest(
            task=self._pb_task(),
            writer=self._writer(),
            codec=c.codec,
            durability=_DURABILITY[(c.durability.replicas > 0, c.durability.fsynced)],
            replicas=c.durability.replicas,
            attempt_id=self._ident.attempt_id,
        )
        if self._ident.batch is not None:
            req.batch = self._ident.batch
        r = self._transport.open(req, self.task_id)
        held = prior.data if c.mode == "mirror" and prior is not None else None
        reuse = held is not None and prior is not None and prior.version == r.version
        session = Session(
            attempt_id=self._ident.attempt_id,
            batch=self._ident.batch,
            epoch=r.epoch,
            version=r.version,
            data=held if reuse else None,
            position=r.position if r.has_position else None,
            info=OpenInfo(
                r.epoch,
                r.committed_batch,
                r.size,
                r.version,
                r.rolled_back,
                r.rolled_back_keys,
                restored=False,
                reused_claim=r.reused_claim,
            ),
            packed=r.packed_commits,
            entry_bytes=prior.entry_bytes if prior is not None else 0.0,
        )
        if c.mode == "mirror" and session.data is None:
            if r.size == 0:
                session.data = {}  # nothing stored: no Restore round trip
            elif held is not None and prior is not None and _same_generation(prior, r.version):
                self._restore(session, since=prior)  # only what changed since
            else:
                self._restore(session)
        return session

    def _restore(self, session: Session, since: Session | None = None) -> None:
        """Restore the committed state into `session.data`.

        With `since` (a session whose data is the state at its version), ask only for
        what changed since that version; the sidecar answers with a delta when the
        task's change log covers it, else with the whole state.
        """
        data: dict[str, Any] = {}
        deleted: list[str] = []
        delta = [False]
        decode = self._codec.decode
        task = self.task_id
        json = self._json
        wire = [0]  # bytes received: the state's size per key (`_cache.size_of`)

        def on_chunk(chunk: pb.RestoreChunk) -> None:
            wire[0] += len(chunk.packed) + (chunk.ByteSize() if chunk.entries else 0)
            if chunk.delta:
                delta[0] = True
                deleted.extend(chunk.deletes)
                if chunk.packed_deletes:
                    deleted.extend(unpack_keys(task, chunk.packed_deletes))
            decode_chunk(task, chunk, decode, json, data)

        def on_reset() -> None:
            wire[0] = 0
            data.clear()
            deleted.clear()
            delta[0] = False

        req = pb.RestoreRequest(task=self._pb_task(), epoch=session.epoch, packed=True)
        if since is not None:
            req.since_version = since.version
        version = self._transport.restore(req, task, on_chunk, on_reset)
        sent = len(data) + len(deleted)
        if delta[0] and since is not None and since.data is not None:
            state = since.data  # this process's copy at since.version: brought up to date
            for k in deleted:
                state.pop(k, None)
            state.update(data)
            data = state
        session.data = data
        session.version = version or session.version
        # a delta's few keys say little of the state's sizes: keep what was known (Open
        # carried it over from the session the delta was applied to)
        if sent and not (delta[0] and session.entry_bytes):
            session.entry_bytes = wire[0] / sent
        session.info = replace(
            session.info, restored=True, size=len(data), delta=delta[0], restored_keys=sent
        )

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        session = self._session
        if session is None:
            return False
        try:
            if exc_type is None and self.phase is Phase.OPEN:
                self.commit()
                self.phase = Phase.CLOSED
            else:
                self._discard(session)
        except BaseException:
            self._discard(session)
            raise
        finally:
            session.active = False
        return False

    def _discard(self, session: Session) -> None:
        """Forget uncommitted changes.

        In-place edits may have touched the cached data, so the next block of this
        attempt restores the committed state again.
        """
        self.phase = Phase.FAILED
        session.data = None
        self._data = {}
        self._changes.clear()

    # -- commit -----------------------------------------------------------------

    def commit(self, position: Any = MISSING) -> None:
        """Commit what changed since the last commit, atomically, fenced by the epoch.

        Called by `__exit__`; call it yourself for checkpoints in long batch tasks. With
        `position` (any JSON value), a resumed attempt reads it back as `s.position` and
        continues after it.
        """
        session = self._require_open()
        upserts, deletes = self._changes.collect(self._data)
        pos = None
        if position is not MISSING:
            pos = self._codec.encode(self.task_id, "<position>", position)
        c = self.config
        budget = c.max_message_bytes - REQUEST_HEADROOM
        parts = pieces(self.task_id, upserts, deletes, budget, session.packed)
        if len(parts) > 1 and self._ident.batch is None:
            total = sum(len(k) + len(v) + ENTRY_OVERHEAD for k, v in upserts)
            raise LimitError(
                f"task {self.task_id}: this commit is {total} bytes, over the message limit of "
                f"{c.max_message_bytes} bytes (TASKSTATE_MAX_MESSAGE_BYTES). Nothing was "
                "sent. Commit more often with s.commit(position=...), or raise "
                "TASKSTATE_MAX_MESSAGE_BYTES and the sidecar's --max-message-bytes together.",
                self.task_id,
            )
        writer = self._writer()
        durability = _DURABILITY[(c.durability.replicas > 0, c.durability.fsynced)]
        try:
            # In a micro-batch, pieces of a large change set are safe: a replay of the batch
            # rolls back every commit of that batch.
            for i, piece in enumerate(parts):
                last = i == len(parts) - 1
                req = pb.CommitRequest(
                    task=self._pb_task(),
                    epoch=session.epoch,
                    durability=durability,
                    replicas=c.durability.replicas,
                    writer=writer,
                    **piece,
                )
                if self._ident.batch is not None:
                    req.batch = self._ident.batch
                if pos is not None and last:
                    req.position = pos
                    req.has_position = True
                r = self._transport.commit(req, self.task_id)
                # Another process serving this attempt may have committed since this one
                # last knew the version: then the cached data lacks its changes, and must
                # not pass for the new version (the next Open restores instead).
                stale = r.base_version and r.base_version != session.version
                session.version = "" if stale or not session.version else r.version
        except BaseException:
            session.data = None  # what Redis holds is no longer known here: restore next time
            raise
        if pos is not None:
            session.position = pos
        if not session.entry_bytes and upserts:  # the state's first sizes: from this commit
            session.entry_bytes = sum(len(k) + len(v) for k, v in upserts) / len(upserts)
        self._changes.clear()

    # -- MutableMapping -----------------------------------------------------------

    def _lookup(self, key: str) -> Any:
        value = self._data.get(key, MISSING)
        if value is not MISSING or self.config.mode == "mirror":
            return value
        if key in self._absent or not isinstance(key, str):
            return MISSING
        session = self._require_open()
        r = self._transport.multi_get(
            pb.GetRequest(task=self._pb_task(), epoch=session.epoch, keys=[key]), self.task_id
        )
        found = r.values[0]
        if not found.found:
            self._absent.add(key)
            return MISSING
        value = self._codec.decode(self.task_id, key, found.value)
        self._data[key] = value
        return value

    def __getitem__(self, key: str) -> Any:
        self._require_open()
        value = self._lookup(key)
        if value is MISSING:
            raise KeyError(key)
        if is_mutable(value) and key not in self._written and key not in self._snap:
            self._snap[key] = self._codec.encode(self.task_id, key, value)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if self.phase is not Phase.OPEN:
            self._require_open()
        # fail here, not at commit; the common scalar case skips the codec's checks
        if self._json and value.__class__ in SCALARS and key.__class__ is str:
            try:
                encoded = orjson.dumps(value)
            except TypeError:
                encoded = self._codec.encode(self.task_id, key, value)
        else:
            encoded = self._codec.encode(self.task_id, key, value)
            if is_mutable(value):
                encoded = REENCODE  # encoded above for the error; again at commit
        self._data[key] = value
        if self._absent:
            self._absent.discard(key)
        self._written[key] = encoded

    def __delitem__(self, key: str) -> None:
        self._require_open()
        if self._lookup(key) is MISSING:
            raise KeyError(key)
        del self._data[key]
        if self.config.mode == "remote":
            self._absent.add(key)
        self._written[key] = None

    def __contains__(self, key: object) -> bool:
        self._require_open()
        return isinstance(key, str) and self._lookup(key) is not MISSING

    def _remote_keys(self) -> list[str]:
        session = self._require_open()
        keys: list[str] = []

        def on_chunk(chunk: pb.RestoreChunk) -> None:
            keys.extend(e.key for e in chunk.entries)

        self._transport.restore(
            pb.RestoreRequest(task=self._pb_task(), epoch=session.epoch),
            self.task_id,
            on_chunk,
            keys.clear,
        )
        return keys

    def __iter__(self) -> Iterator[str]:
        self._require_open()
        if self.config.mode == "mirror":
            return iter(self._data)
        stored = self._remote_keys()
        gone = {k for k, v in self._written.items() if v is None}
        extra = [k for k in self._data if k not in set(stored)]
        return iter([k for k in stored if k not in gone] + extra)

    def __len__(self) -> int:
        self._require_open()
        if self.config.mode == "mirror":
            return len(self._data)
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"TaskState({self.task_id!r}, mode={self.config.mode!r}, phase={self.phase.value})"


def _same_generation(held: Session, version: str) -> bool:
    """Whether `held`'s version is of the same generation as `version` (gen:counter)."""
    gen = held.version.partition(":")[0]
    return bool(gen) and gen == version.partition(":")[0]
