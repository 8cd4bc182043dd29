"""One `with TaskState` block's transaction: what it changed, and how that ends.

A block ends in one of three ways:
- commit: its change set goes to the sidecar now (`Committer`), atomically;
- defer: beside the executor plugin, a later group block of a micro-batch attempt holds
  its changes in this worker for the plugin's flush (`_buffer.py`);
- discard: an exception left the block; nothing is committed, and the session's copy,
  which in-place edits may have touched, is dropped.
"""

from __future__ import annotations

from typing import Any

from ._buffer import buffer, worker_outlives_its_runner
from ._changes import Changes
from ._codec import JsonCodec
from ._commit import Committer
from ._context import TaskIdentity
from ._session import Session


class Block:
    """The changes of one block and its end (commit, defer or discard)."""

    __slots__ = ("changes", "committer", "ctx", "ident", "mirror")

    def __init__(
        self,
        committer: Committer,
        codec: JsonCodec,
        ident: TaskIdentity,
        ctx: Any,
        mirror: bool,
    ) -> None:
        self.committer = committer
        self.changes = Changes(committer.task_id, codec)
        self.ident = ident
        self.ctx = ctx
        self.mirror = mirror

    def commit(self, session: Session, data: dict[str, Any], position: bytes | None) -> None:
        """Commit what changed since the last commit (and `position`), atomically."""
        upserts, deletes = self.changes.collect(data)
        self.committer.send(session, upserts, deletes, position)
        if position is not None:
            session.position = position
        self._settled(session, upserts)

    def defer(self, session: Session, data: dict[str, Any]) -> bool:
        """Hold this block's changes for the executor plugin's flush; False: commit them.

        Only where it pays and changes nothing a job can see: a later block of a
        micro-batch attempt in this process (the groups of applyInPandasWithState after
        the first), in mirror mode (the session's copy carries the held writes to the
        attempt's next blocks), beside a sidecar with the plugin's flush barrier, in a
        process that outlives its runner. A task with one block (mapInPandas,
        foreachPartition) always commits at its exit.
        """
        if not (
            session.flush_barrier
            and session.blocks > 0
            and self.ident.batch is not None
            and self.mirror
            and session.data is not None
            and worker_outlives_its_runner(self.ctx)
        ):
            return False
        upserts, deletes = self.changes.collect(data)
        held = buffer.hold(
            self.ident.task_attempt,
            self.committer.task_id,
            session,
            upserts,
            deletes,
            self.committer,
        )
        if held:
            self._settled(session, upserts)
        return held

    def discard(self, session: Session) -> None:
        """Forget the uncommitted changes.

        In-place edits may have touched the cached data, so the next block of this
        attempt restores the committed state again.
        """
        if session.deferred:  # earlier blocks' held changes: commit them before the copy goes
            buffer.commit_task(self.ident.task_attempt, self.committer.task_id)
        session.data = None
        session.absent = set()
        self.changes.clear()

    def _settled(self, session: Session, upserts: list[tuple[str, bytes]]) -> None:
        """After a commit or a deferral: the state's first sizes, and nothing pending."""
        if not session.entry_bytes and upserts:
            session.entry_bytes = sum(len(k) + len(v) for k, v in upserts) / len(upserts)
        self.changes.clear()
