"""Group change sets held in this worker until the executor plugin's flush.

Beside the executor plugin (the sidecar says so at Open: `flush_barrier`), the blocks of
a micro-batch attempt after its first one in this process (one block per group in
applyInPandasWithState) do not commit: their changes are merged here, per attempt and
task, and the block returns at once. The sidecar asks for them (a FLUSH order on this
process's Attach stream) when the plugin's `onTaskSucceeded` runs, just before Spark
learns that the task succeeded; they are committed then, through the ordinary Commit
RPC, under the attempt's epoch. See sidecar/flush.py for the whole protocol.

What a block sees is unchanged: the session's data holds every earlier block's writes
(mirror mode), so a later group of the attempt reads them. What another attempt sees is
unchanged too: nothing held is visible in Redis before the flush, and an attempt that
fails never flushes (its retry rolls the batch back anyway).

The first deferral of an attempt in this process waits for the sidecar to record it
(one round trip), so the registration is in place before the task can end. When no
registration is possible (no Attach stream, the stream broke), the block commits
synchronously, with everything held for its task.

The Attach stream, and attaching again after a sidecar restart, are _attach.py's. A
commit Redis does not take at the flush (an outage, replicas behind) is handed over to the
sidecar, which waits Redis out within the flush timeout: PySpark closes a Python worker
that has been idle for a minute, and this one is idle while its task's end waits.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from taskstate.proto import taskstate_pb2 as pb

from ._attach import ANSWERS_KEPT, Attachment
from ._commit import Committer, Sender
from ._errors import DurabilityError, StorageUnavailableError, TaskStateError
from ._session import Session
from ._transport import Transport

log = logging.getLogger("taskstate.client")

REATTACH_S = 120.0  # how long a process holding changes tries to attach again
HANDOVERS_KEPT = 4  # answers whose hand-overs are kept, to give again on a new stream


def changes_can_wait_for_the_flush(ctx: object) -> bool:
    """Whether held changes can wait in this process until the plugin flushes the task.

    Not in a PySpark worker that exits as soon as its runner ends
    (`spark.python.worker.reuse=false`: Spark then leaves SPARK_REUSE_WORKER out of the
    worker's environment): the changes would die with it before the plugin's flush, and
    every such task would fail-stop its executor. A block with a PySpark TaskContext runs
    in a worker. Outside PySpark (a LocalContext) the process lives on, but no Spark task
    ends to be flushed: only a LocalContext made with `plugin_flush=True`, whose FLUSH
    its maker sends (tests of the flush), holds changes. (The environment alone cannot
    tell a worker: a driver's SparkContext sets SPARK_BUFFER_SIZE in its own process.)
    """
    if not type(ctx).__module__.startswith("pyspark"):
        return bool(getattr(ctx, "plugin_flush", False))
    return bool(os.environ.get("SPARK_REUSE_WORKER"))


@dataclass
class Held:
    """One task's changes, left by the blocks of one attempt in this process."""

    session: Session
    committer: Sender  # the task's commits (a Committer): never a block
    upserts: dict[str, bytes] = field(default_factory=dict)
    deletes: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def merge(self, upserts: list[tuple[str, bytes]], deletes: list[str]) -> None:
        """A later block's changes win over an earlier one's."""
        for key, value in upserts:
            self.upserts[key] = value
            self.deletes.discard(key)
        for key in deletes:
            self.upserts.pop(key, None)
            self.deletes.add(key)

    def hand_over(self) -> list[pb.CommitRequest]:
        """The Commit requests of what is held, for the sidecar to make (`clear` after)."""
        with self.lock:
            return self.committer.requests(
                self.session, list(self.upserts.items()), list(self.deletes)
            )

    def clear(self) -> None:
        """Forget what is held (committed, or handed over)."""
        with self.lock:
            self.upserts.clear()
            self.deletes.clear()
            self.session.deferred = False

    def commit(self) -> int:
        """Commit what is held, once; returns the number of keys.

        Two threads may commit the same changes (a block's own, and the attach thread's
        for an attempt no sidecar adopted): the second finds them committed, so held
        values never land after a newer commit of the block.
        """
        with self.lock:
            upserts, deletes = list(self.upserts.items()), list(self.deletes)
            if upserts or deletes:
                self.committer.send(self.session, upserts, deletes)
            self.upserts.clear()
            self.deletes.clear()
            self.session.deferred = False
            return len(upserts) + len(deletes)


@dataclass
class _Attempt:
    """What this process holds for one task attempt, and the stream it is registered on."""

    attachment: Attachment
    tasks: dict[str, Held] = field(default_factory=dict)


class Buffer:
    """The held change sets of this process, by task attempt, then task."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, _Attempt] = {}
        self._attachments: dict[str, Attachment] = {}
        # attempt -> what its FLUSH was answered with (HandOver messages, the FlushResult)
        self._answers: OrderedDict[int, list[pb.AttachMessage]] = OrderedDict()
        self._pid = os.getpid()

    def _forked(self) -> None:
        """In a forked child (the lock held): forget the parent's stream and held changes.

        They are the parent's to flush; a child that merged into them would hold changes
        no sidecar knows of, lost when it exits.
        """
        if os.getpid() != self._pid:
            self._attachments.clear()
            self._held.clear()
            self._answers.clear()
            self._pid = os.getpid()

    def _attachment(self, transport: Transport) -> Attachment:
        """The one stream to `transport`'s sidecar: a new one when the last one ended.

        A new stream names in its hello what this process holds on ended streams, and the
        answers the last one gave (`_attach.py`).
        """
        with self._lock:
            self._forked()
            old = self._attachments.get(transport.target)
            if old is not None and not old.broken:
                return old
            pending = [
                n
                for n, e in self._held.items()
                if e.attachment.broken and e.attachment.transport.target == transport.target
            ]
            carried = [n for n in old.answered if n not in pending] if old is not None else []
            a = Attachment(transport, self, tuple(pending + carried))
            a.answered.extend(carried)
            self._attachments[transport.target] = a
            return a

    def hold(
        self,
        attempt: int,
        task_id: str,
        session: Session,
        upserts: list[tuple[str, bytes]],
        deletes: list[str],
        committer: Committer,
    ) -> bool:
        """Hold one block's changes until the flush; False: the caller commits them now.

        On False, whatever this process held for the task in this attempt has been
        committed already (the sidecar could not be told, or no longer knows, that this
        process holds changes of the attempt).
        """
        with self._lock:
            self._forked()
            entry = self._held.get(attempt)
            if entry is not None and not entry.attachment.broken:  # one look, one merge
                self._merge(entry, task_id, session, upserts, deletes, committer)
                return True
        if entry is not None:  # its Attach stream broke
            self.commit_task(attempt, task_id)
            return False
        transport = committer.transport
        a = self._attachment(transport)
        if not a.register(attempt, transport.timeout_s):
            return False
        with self._lock:
            if a.broken:  # ended since: a new stream would not name what is merged now
                return False
            # one look, one merge: a flush that takes the entry cannot land in between
            entry = self._held.setdefault(attempt, _Attempt(a))
            self._merge(entry, task_id, session, upserts, deletes, committer)
        return True

    @staticmethod
    def _merge(
        entry: _Attempt,
        task_id: str,
        session: Session,
        upserts: list[tuple[str, bytes]],
        deletes: list[str],
        committer: Committer,
    ) -> None:
        """Add one block's changes to what the attempt holds for its task (the lock held)."""
        held = entry.tasks.get(task_id)
        if held is None:
            held = entry.tasks[task_id] = Held(session, committer)
        held.merge(upserts, deletes)
        session.deferred = True

    def commit_task(self, attempt: int, task_id: str) -> None:
        """Commit what is held for one task of `attempt` now."""
        with self._lock:
            self._forked()
            entry = self._held.get(attempt)
            held = entry.tasks.get(task_id) if entry is not None else None
        if held is None:
            return
        held.commit()
        with self._lock:
            if entry is not None:
                entry.tasks.pop(task_id, None)

    def flush(self, attempt: int) -> list[pb.AttachMessage]:
        """The answer to a FLUSH order: commit everything held for `attempt`.

        A commit Redis does not take (an outage, its replicas behind) is handed over to
        the sidecar instead (HandOver messages before the answer), which waits Redis out:
        this process need not live that long. Asked again on a new stream (the old
        sidecar died before it had the answer), the same messages are sent again.
        """
        with self._lock:
            self._forked()
            entry = self._held.pop(attempt, None)
            if entry is None and attempt in self._answers:
                return self._answers[attempt]
        answer = _flush(attempt, entry)
        with self._lock:
            self._answers[attempt] = answer
            while len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)
            # hand-overs (change sets) only of the latest: an older one asked again
            # fails its flush on the count (safe: the executor stops), instead of memory
            for n in list(self._answers)[:-HANDOVERS_KEPT]:
                self._answers[n] = self._answers[n][-1:]
        return answer

    def attached_again(self, new: Attachment) -> None:
        """`new` attached, naming what ended streams left: hand over what it adopted.

        What the sidecar did not adopt (it does not know of it: no FLUSH of it will come)
        is committed now, on `new`'s thread, before it reads any order.
        """
        orphaned: list[tuple[str, Held]] = []
        with self._lock:
            for n in new.held:
                e = self._held.get(n)
                if e is None or not e.attachment.broken:
                    continue
                if n in new.adopted:
                    e.attachment = new
                    new.live.add(n)
                else:
                    orphaned += self._held.pop(n).tasks.items()
        log.warning(
            "taskstate: attached again to %s, holding group changes of task attempts %s",
            new.transport.target,
            sorted(new.adopted),
        )
        for task_id, held in orphaned:
            try:
                held.commit()
            except TaskStateError as exc:
                log.error(
                    "taskstate: task %s: held group changes of an attempt the restarted sidecar "
                    "does not know of could not be committed: %s",
                    task_id,
                    exc,
                )

    def reattach(self, transport: Transport) -> None:
        """A stream to `transport`'s sidecar ended: attach again (the sidecar may wait for us).

        Runs on the ended stream's thread, which has nothing else left to do. One stream
        is tried at a time: it waits for the sidecar (gRPC's wait for ready) until it
        attaches or ends.
        """
        give_up = time.monotonic() + REATTACH_S
        delay = 0.1
        while time.monotonic() < give_up:
            a = self._attachment(transport)
            if a.attached(min(5.0, max(0.1, give_up - time.monotonic()))):
                return
            if a.broken:
                time.sleep(delay)
                delay = min(1.0, delay * 2)
        log.error(
            "taskstate: could not attach again to %s within %.0f s: held group changes "
            "cannot be flushed (the executor plugin stops the executor)",
            transport.target,
            REATTACH_S,
        )

    def discard(self, attempt: int) -> None:
        """The attempt failed: forget its changes, and the copies they were merged into."""
        with self._lock:
            self._forked()
            entry = self._held.pop(attempt, None)
        for held in entry.tasks.values() if entry is not None else ():
            held.session.data = None
            held.session.deferred = False

    def holds(self, attempt: int) -> bool:
        """Whether this process holds changes of `attempt` (tests, diagnostics)."""
        with self._lock:
            self._forked()
            entry = self._held.get(attempt)
            return entry is not None and bool(entry.tasks)


def _flush(attempt: int, entry: _Attempt | None) -> list[pb.AttachMessage]:
    """Commit what `entry` holds; hand over what Redis does not take; the answer last."""
    keys, out = 0, []
    handing: TaskStateError | None = None  # once Redis did not take one, the rest is handed
    try:
        for held in entry.tasks.values() if entry is not None else ():
            if handing is None:
                try:
                    keys += held.commit()
                    continue
                except (StorageUnavailableError, DurabilityError) as exc:
                    if not _passing(exc):
                        raise
                    handing = exc
            requests = held.hand_over()
            out += [
                pb.AttachMessage(handover=pb.HandOver(task_attempt=attempt, commit=r))
                for r in requests
            ]
            keys += len(held.upserts) + len(held.deletes)
            held.clear()
        if handing is not None:
            log.warning(
                "taskstate: Redis did not take a flush; handed %d commit(s) to the sidecar, "
                "which waits for Redis: %s",
                len(out),
                handing,
            )
    except TaskStateError as exc:
        return [*out, _result(attempt, False, f"{exc.code}: {exc}", keys)]
    except Exception as exc:  # never leave the sidecar waiting without an answer
        return [*out, _result(attempt, False, f"{type(exc).__name__}: {exc}", keys)]
    answer = _result(attempt, True, "", keys)
    answer.flushed.handed_over = len(out)
    return [*out, answer]


def _passing(exc: TaskStateError) -> bool:
    """Whether the sidecar can succeed by asking again: Redis away, or replicas behind.

    Not a Redis that refuses the sidecar's credentials, nor a durability the servers cannot
    give (the sidecar's messages say which: sidecar/flush_writes.py `passing`).
    """
    if isinstance(exc, DurabilityError):
        return "did not reach durability" in str(exc)
    return "Redis refused the sidecar" not in str(exc)


def _result(attempt: int, ok: bool, error: str, keys: int) -> pb.AttachMessage:
    return pb.AttachMessage(
        flushed=pb.FlushResult(task_attempt=attempt, ok=ok, error=error[:2000], keys=keys)
    )


buffer = Buffer()
