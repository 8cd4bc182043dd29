"""How a task attempt's claim is taken: Open, and a full or delta Restore.

`Claims` makes the `Session`s (`_session.py`) a process holds, by the reuse rules below.
Claims are per task attempt, not per process: the first block of an attempt Opens the
task (new fencing epoch, rollback of a replayed batch); later blocks of the same attempt
in the same process (one per group in applyInPandasWithState) reuse that claim without a
round trip, each committing its own changes; a block of the same attempt in another
Python process (Spark runs applyInPandasWithState's timed-out groups in a second worker)
Opens again and the sidecar hands it the same claim: same epoch, nothing rolled back. A
process that already holds the committed version skips Restore. A block made with
`open_at="exit"` that only writes sends its Open with its Commit (`open_commit`).
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto.versions import Version, same_generation

from ._commit import Committer
from ._config import TaskStateConfig
from ._context import TaskIdentity
from ._reads import note_restore
from ._schema import Schema
from ._session import RECENT, OpenInfo, Session, later_block
from ._transport import Transport
from ._wire import decode_chunk, unpack_keys


class Claims:
    """Open and Restore for one task, as a TaskState in front of them needs them.

    The reuse rules: a later block of the same attempt in this process reuses its claim
    (no round trip); otherwise Open, and then, in mirror mode, no Restore when this
    process already holds the committed version, only what changed since when it holds
    an older version of the same generation, else the whole state.
    """

    __slots__ = ("config", "event_time_ms", "ident", "json", "pb_task", "schema", "task_id",
                 "transport", "writer")  # fmt: skip

    def __init__(
        self,
        task_id: str,
        transport: Transport,
        schema: Schema,
        config: TaskStateConfig,
        ident: TaskIdentity,
        pb_task: Callable[[], pb.TaskId],
        writer: Callable[[], pb.Writer],
        event_time_ms: int | None = None,
    ) -> None:
        self.task_id = task_id
        self.transport = transport
        self.schema = schema  # decodes (and upgrades) what it restores
        self.json = schema.fast_json
        self.event_time_ms = event_time_ms  # TaskState(now=...): the batch's event time
        self.config = config
        self.ident = ident
        self.pb_task = pb_task
        self.writer = writer

    def enter(self, prior: Session | None) -> Session:
        """The session a new block of this task runs in (`prior`: this process's)."""
        ident = self.ident
        if prior is not None and prior.schema_version != self.schema.version:
            prior.data = None  # decoded for another version of the code: read it again
        if prior is not None and (prior.attempt_id, prior.batch) == (ident.attempt_id, ident.batch):
            session = prior
            session.info = later_block(session.info)
            if self.config.mode == "mirror" and session.data is None:
                if session.deferred:
                    # the copy that carried the attempt's held changes was dropped (their
                    # commit failed in a block that raised): commit them before reading
                    # Redis, or this block would read and build on values without them
                    from ._buffer import buffer  # (it imports this module)

                    buffer.commit_task(ident.task_attempt, self.task_id)
                self.load(session)
            return session
        return self.open(prior)

    def can_wait(self, prior: Session | None) -> bool:
        """Whether a new block may leave its Open to its exit (`open_commit`).

        A mirror block whose enter would Open (this process holds the task from an earlier
        attempt or batch), with values stored as they are encoded (no time to live, no
        schema version: no envelope needs the batch's now). Anything but `s[k] = v` and
        reading back what it wrote opens it there.
        """
        ident = self.ident
        return (
            prior is not None
            and not prior.active
            and not prior.deferred
            and prior.pid == os.getpid()
            and prior.schema_version == self.schema.version
            and (prior.attempt_id, prior.batch) != (ident.attempt_id, ident.batch)
            and self.config.mode == "mirror"
            and self.schema.plain
        )

    def open(self, prior: Session | None) -> Session:
        """Open the task for this attempt; in mirror mode, bring its state here."""
        r = self.transport.open(self._open_request(), self.task_id)
        session = self._claimed(r, prior)
        if self.config.mode == "mirror" and session.data is None:
            held = self._held(prior)
            if r.size == 0:
                session.data = {}  # nothing stored: no Restore round trip
            elif (
                held is not None and prior is not None and same_generation(prior.version, r.version)
            ):
                self.restore(session, since=prior)  # only what changed since
            else:
                self.load(session)
        return session

    def open_commit(
        self,
        prior: Session,
        committer: Committer,
        upserts: list[tuple[str, bytes]],
        values: dict[str, Any],
    ) -> Session | None:
        """Open and commit `upserts` in one call: a mirror block that only wrote.

        `prior` is this process's session of an earlier attempt; `values` are the block's
        writes as it made them. None, and nothing sent, when the change set is over one
        message: the block then opens and commits as any other. The session keeps this
        process's copy (with the block's writes) when the Open found the version that copy
        is of; else it has no data, and the attempt's next block here reads the state
        again.
        """
        commit = committer.whole(upserts)
        if commit is None:
            return None
        req = pb.OpenCommitRequest(open=self._open_request(), commit=commit)
        r = self.transport.open_commit(req, self.task_id)
        session = self._claimed(r.open, prior)
        session.info = replace(session.info, with_commit=True)
        data = session.data
        base = r.commit.base_version
        if data is not None and (not base or base == session.version):
            data.update(values)
            session.absent.difference_update(values)
        else:
            session.data = None
        session.version = r.commit.version
        return session

    def _open_request(self) -> pb.OpenRequest:
        c = self.config
        durability, replicas = c.durability.to_wire()
        req = pb.OpenRequest(
            task=self.pb_task(),
            writer=self.writer(),
            codec=c.codec,
            durability=durability,
            replicas=replicas,
            attempt_id=self.ident.attempt_id,
            partitions=c.partitions or 0,
        )
        if self.ident.batch is not None:
            req.batch = self.ident.batch
        if self.event_time_ms is not None:
            req.event_time_ms = self.event_time_ms
        return req

    def _claimed(self, r: pb.OpenResponse, prior: Session | None) -> Session:
        """The session an Open's answer gives; its data is `prior`'s when still current."""
        held = self._held(prior)
        reuse = held is not None and prior is not None and prior.version == r.version
        session = Session(
            attempt_id=self.ident.attempt_id,
            batch=self.ident.batch,
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
                expired=r.expired,
                now_ms=r.now_ms,
            ),
            entry_bytes=prior.entry_bytes if prior is not None else 0.0,
            flush_barrier=r.flush_barrier,
            now_ms=r.now_ms,
            schema_version=self.schema.version,
        )
        if reuse and prior is not None:
            session.complete, session.absent, session.misses, session.miss_seconds = (
                prior.complete,
                prior.absent,
                prior.misses,
                prior.miss_seconds,
            )
        return session

    def _held(self, prior: Session | None) -> dict[str, Any] | None:
        """This process's copy of the committed state (mirror mode), at `prior.version`.

        A copy with another attempt's held changes in it (never flushed) is not the
        committed state, whatever its version says.
        """
        if self.config.mode != "mirror" or prior is None or prior.deferred:
            return None
        return prior.data

    def load(self, session: Session) -> None:
        """Mirror mode without a copy here: read on demand, or restore the whole state."""
        if self.config.load == "eager":
            self.restore(session)
            return
        session.data = {}
        session.complete = False
        session.absent = set()
        session.misses = 0
        session.miss_seconds = 0.0
        session.info = replace(session.info, on_demand=True)

    def load_rest(self, session: Session, written: dict[str, Any]) -> None:
        """Complete a session that reads on demand: the rest of the committed state.

        What the session holds wins (values read, maybe changed in place, or written);
        keys it knows absent (`session.absent`, deleted by this block included) stay so.
        `session.data` is a new dict afterwards.
        """
        data, absent = session.data, session.absent
        assert data is not None  # noqa: S101 - only called on a session reading on demand
        rest = Session(
            attempt_id=session.attempt_id,
            batch=session.batch,
            epoch=session.epoch,
            version=session.version,
            data=None,
            position=None,
            info=session.info,
        )
        self.restore(rest)
        merged = rest.data if rest.data is not None else {}
        for k in absent:  # deleted by this block, or absent when read
            merged.pop(k, None)
        for k, v in written.items():
            if v is None:
                merged.pop(k, None)
        merged.update(data)  # a few keys into many: the caller takes the new dict
        session.data = merged
        absent.clear()
        session.complete = True
        if not session.entry_bytes:
            session.entry_bytes = rest.entry_bytes
        session.info = replace(
            session.info, restored=True, size=len(merged), restored_keys=rest.info.restored_keys
        )

    def restore(self, session: Session, since: Session | None = None) -> None:
        """Restore the committed state into `session.data`.

        With `since` (a session whose data is the state at its version), ask only for
        what changed since that version; the sidecar answers with a delta when the
        task's change log covers it, else with the whole state (eager loading) or with
        nothing, and then the session reads on demand (`load`), unless the copy here was
        whole and at most RECENT commits old: then it restores in full.
        """
        data: dict[str, Any] = {}
        deleted: list[str] = []
        delta = [False]
        not_covered = [False]
        decode = self.schema.decode
        task = self.task_id
        json = self.json
        wire = [0]  # bytes received: the state's size per key (`_cache.size_of`)

        def on_chunk(chunk: pb.ReadChunk) -> None:
            wire[0] += len(chunk.packed)
            not_covered[0] = chunk.not_covered
            if chunk.delta:
                delta[0] = True
                deleted.extend(unpack_keys(task, chunk.packed_deletes))
            decode_chunk(task, chunk, decode, json, data)

        def on_reset() -> None:
            wire[0] = 0
            data.clear()
            deleted.clear()
            delta[0] = False

        req = pb.ReadRequest(task=self.pb_task(), epoch=session.epoch)
        if since is not None:
            req.since_version = since.version
            req.delta_only = self.config.load != "eager"
        t0 = time.perf_counter()
        version = self.transport.read(req, task, on_chunk, on_reset).version
        if not delta[0] and not not_covered[0]:
            note_restore(len(data), time.perf_counter() - t0)
        if not_covered[0]:  # the log no longer covers the copy here
            session.version = version or session.version
            if since is not None and since.complete and _commits(since, session) <= RECENT:
                # a whole copy only a few commits old, and yet more changed since than the
                # log keeps (an eighth of the state): this task's batches touch much of
                # its state, so reading on demand would end in a restore too, later
                self.restore(session)
                return
            self.load(session)  # read on demand instead
            return
        sent = len(data) + len(deleted)
        complete = True
        if delta[0] and since is not None and since.data is not None:
            state = since.data  # this process's copy at since.version: brought up to date
            for k in deleted:
                state.pop(k, None)
            state.update(data)
            complete = since.complete
            if not complete:  # a partial copy: what it knows absent changes too
                session.absent = since.absent
                session.absent.difference_update(data)
                session.absent.update(deleted)
                session.misses, session.miss_seconds = since.misses, since.miss_seconds
            data = state
        session.data = data
        session.complete = complete
        if complete:
            session.absent = set()
        session.version = version or session.version
        # a delta's few keys say little of the state's sizes: keep what was known (Open
        # carried it over from the session the delta was applied to)
        if sent and not (delta[0] and session.entry_bytes):
            session.entry_bytes = wire[0] / sent
        size = len(data) if complete else session.info.size
        session.info = replace(
            session.info, restored=True, size=size, delta=delta[0], restored_keys=sent
        )


def _commits(held: Session, now: Session) -> int:
    """How many versions `now` is past `held` (of one generation; else a large number)."""
    a, b = Version.parse(held.version), Version.parse(now.version)
    n = b.commits_since(a) if a is not None and b is not None else None
    return 1 << 30 if n is None else n


@functools.cache
def _host() -> str:
    return socket.gethostname()  # a system call: once per process, not once per block


def writer_of(ident: TaskIdentity) -> pb.Writer:
    """Who writes: recorded with each Open and Commit for operators."""
    return pb.Writer(
        host=_host(),
        executor=os.environ.get("SPARK_EXECUTOR_ID", ""),
        attempt=ident.attempt,
        pid=os.getpid(),
    )
