"""One `with TaskState` block's transaction: what it changed, and how that ends.

A block ends in one of three ways:
- commit: its change set goes to the sidecar now (`Committer`), atomically;
- defer: beside the executor plugin, a later group block of a micro-batch attempt holds
  its changes in this worker for the plugin's flush (`_buffer.py`);
- discard: an exception left the block; nothing is committed, and the session's copy,
  which in-place edits may have touched, is dropped.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import orjson

from ._buffer import buffer, changes_can_wait_for_the_flush
from ._cache import remember
from ._changes import REENCODE, SCALARS, Changes, is_mutable
from ._claims import Claims
from ._codec import JsonCodec
from ._commit import Committer
from ._context import TaskIdentity
from ._schema import NO_TTL, Schema
from ._session import Session


class Phase(enum.Enum):
    """Where a TaskState is in its life cycle."""

    CREATED = "created"
    OPEN = "open"
    CLOSED = "closed"
    FAILED = "failed"


class Block:
    """The changes of one block and its end (commit, defer or discard)."""

    __slots__ = ("changes", "committer", "ctx", "head", "ident", "json", "mirror", "plain",
                 "schema")  # fmt: skip

    def __init__(
        self,
        committer: Committer,
        schema: Schema,
        ident: TaskIdentity,
        ctx: Any,
        mirror: bool,
    ) -> None:
        self.committer = committer
        self.schema = schema
        # the assignment's fast path: a scalar encoded by orjson, stored bare (no time to
        # live, version 1) or after the envelope's head, the same for every key the block
        # writes with its own time to live at one now (head: that now and the head)
        self.json = type(schema.codec) is JsonCodec
        self.plain = self.json and schema.plain
        self.head: tuple[int, bytes] | None = None
        self.changes = Changes(committer.task_id, schema.codec)
        self.ident = ident
        self.ctx = ctx
        self.mirror = mirror

    def commit(self, session: Session, data: dict[str, Any], position: bytes | None) -> None:
        """Commit what changed since the last commit (and `position`), atomically.

        Changes earlier blocks of the attempt hold for the flush are committed first: sent
        later, they would overwrite this block's newer values (`s.commit()` in a group).
        """
        if session.deferred:
            buffer.commit_task(self.ident.task_attempt, self.committer.task_id)
        upserts, deletes = self.changes.collect(data, self.wrap(session))
        self.committer.send(session, upserts, deletes, position)
        if position is not None:
            session.position = position
        self._settled(session, upserts)

    def open_commit(self, claims: Claims, prior: Session, data: dict[str, Any]) -> Session | None:
        """A block that only wrote, never opened: Open and Commit in one call (OpenCommit).

        `prior` is this process's session of an earlier attempt of the task, `data` the
        block's writes. Returns the attempt's session, committed; None when the block must
        open and commit as any other (`Claims.open_commit`).
        """
        upserts, _ = self.changes.collect(data)  # (a delete or a read opened the block)
        session = claims.open_commit(prior, self.committer, upserts, data)
        if session is not None:
            self._settled(session, upserts)
            session.blocks += 1
            c = self.committer.config
            remember(self.committer.task_id, session, c.cache_tasks, c.cache_bytes)
        return session

    def assign(
        self,
        data: dict[str, Any],
        absent: set[str],
        key: str,
        value: Any,
        ttl: Any = NO_TTL,
        now_ms: int = 0,
    ) -> None:
        """`s[key] = value` (with `ttl`: `s.set(key, value, ttl=...)`), checked now.

        Encoded here, so that a value JSON cannot hold fails at the assignment, not at the
        commit; the common case (a scalar, no envelope) skips the codec's checks. A dict or
        list is encoded again at commit (it may change in place meanwhile).
        """
        changes = self.changes
        encoded: Any = None
        if self.json and ttl is NO_TTL and value.__class__ in SCALARS and key.__class__ is str:
            try:
                encoded = orjson.dumps(value)
            except TypeError:
                encoded = None  # (an int beyond 64 bits) the codec's path below
            else:
                if not self.plain:
                    encoded = self._head(now_ms) + encoded
                else:
                    # a copy the size of the value: orjson's own buffers, held to the
                    # commit, fragment a fresh worker's heap (docs/benchmarks.md, "Figures
                    # behind code choices")
                    encoded = memoryview(encoded).tobytes()
        if encoded is None:
            encoded = self.schema.codec.encode(changes.task, key, value)
            if is_mutable(value):
                encoded = REENCODE  # encoded above for the error; again at commit
            elif not self.schema.plain or ttl is not NO_TTL:
                encoded = self.schema.wrap(encoded, now_ms, self.schema.ttl_for(ttl))
        data[key] = value
        if absent:
            absent.discard(key)
        changes.written[key] = encoded
        if ttl is not NO_TTL:
            changes.ttls[key] = ttl
        elif changes.ttls:
            changes.ttls.pop(key, None)  # the block's time to live again

    def _head(self, now_ms: int) -> bytes:
        """The envelope before the JSON of a value written with the block's time to live."""
        head = self.head
        if head is None or head[0] != now_ms:
            head = self.head = (now_ms, self.schema.wrap(b"", now_ms, self.schema.ttl_ms))
        return head[1]

    def wrap(self, session: Session) -> Callable[[bytes, Any], bytes] | None:
        """How the values encoded at commit are stored (None: as they are encoded)."""
        schema = self.schema
        if schema.plain and not self.changes.ttls:
            return None
        now = session.now_ms
        head = self._head(now)  # the block's own time to live: one head for every key

        def wrap(encoded: bytes, ttl: Any) -> bytes:
            if ttl is NO_TTL:
                return head + encoded
            return schema.wrap(encoded, now, schema.ttl_for(ttl))

        return wrap

    def defer(self, session: Session, data: dict[str, Any]) -> bool:
        """Hold this block's changes for the executor plugin's flush; False: commit them.

        Only where it pays and changes nothing a job can see: a later block of a
        micro-batch attempt in this process (the groups of applyInPandasWithState after
        the first), in mirror mode (the session's copy carries the held writes to the
        attempt's next blocks), beside a sidecar with the plugin's flush barrier, in a
        process that lives until the plugin flushes the task (a reused PySpark worker, or a
        LocalContext made with plugin_flush=True). A task with one block (mapInPandas,
        foreachPartition) always commits at its exit.
        """
        if not (
            session.flush_barrier
            and session.blocks > 0
            and self.ident.batch is not None
            and self.mirror
            and session.data is not None
            and changes_can_wait_for_the_flush(self.ctx)
        ):
            return False
        upserts, deletes = self.changes.collect(data, self.wrap(session))
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
