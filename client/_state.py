"""TaskState: a task's state as a MutableMapping, restored on enter, committed on exit.

Life cycle (one object, one `with` block)::

    CREATED --enter--> OPEN --exit ok--> CLOSED      (changes committed)
                            --exit exc--> FAILED      (changes discarded, exception re-raised)
                            --commit()--> OPEN        (a checkpoint; the block goes on)

How blocks share a task attempt's claim: `_claims.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, Literal

from ._block import Block, Phase
from ._cache import sessions, take
from ._changes import MISSING, SCALARS, is_mutable
from ._config import open_at_exit
from ._context import check_batch, current_context, identity
from ._errors import TaskStateError
from ._parts import parts_for
from ._reads import LOAD_REST
from ._schema import NO_TTL, Upgrade
from ._session import OpenInfo, Session


class TaskState(MutableMapping[str, Any]):
    """A Spark task's state: a MutableMapping of JSON values that survives crashes.

    Enter = Open + Restore; exit = Commit of what changed (with an exception: nothing
    committed, the exception re-raised). A nested value changed in place
    (`s["k"]["n"] += 1`) is committed too. Values: dict, list, str, int, float, bool, None.

    Example:
        ```python
        with TaskState(TaskContext.get(), component="hashtag-ewma") as s:
            s["#spark"] = {"rate": 1.7, "last": 12}
        ```

    Args:
        ctx: The task context; defaults to `pyspark.TaskContext.get()`. Outside Spark,
            pass `LocalContext(partition_id, batch_id)`.
        component: The operator's stable name (Storm's componentId).
        namespace: The job's stable name; else `TASKSTATE_NAMESPACE`; else the value set
            by `taskstate.spark_plugin.configure`; else ConfigError.
        sidecar: `unix:///PATH` or `tcp://HOST:PORT`; else `TASKSTATE_SIDECAR`; else
            `configure(spark, sidecar=...)`'s; else the executor plugin's; else the default.
        mode: `mirror` (state in task memory, double-written) or `remote` (reads go
            through the sidecar).
        durability: `applied`, `replicated:N`, `fsynced` or `replicated:N,fsynced`.
        codec: `json`.
        partitions: The job's partition count for this component (`repartition(N, key)`,
            or a stateful operator's checkpoint's). Recorded with the state; a run under
            another count raises PartitionCountError (`taskstate rescale` moves the keys).
        ttl: Seconds to live of every key the block writes (restarting at each write;
            `s.set(key, value, ttl=...)` for one key). None: never expire.
        now: The batch's event time (epoch ms, or an aware datetime): keys expire in
            event time (fixed by the batch's first block). None: processing time.
        version: The schema version the code writes (1, 2, ...); a newer stored value
            raises SchemaVersionError.
        upgrade: `{v: f}`: `f` turns a value of version `v` into one of `v + 1`.
        open_at: `enter`, or `exit` for a block that only writes: once this process has
            opened the task, its Open goes with its Commit in one call at the exit.

    Raises:
        ConfigError: A bad argument or setting, or no namespace.
        FencedError: A newer attempt of the task holds its claim.
        StateAheadError: The state is at a later batch than the one Spark runs.
        PartitionCountError: The state was split into another partition count.
        StateLostError: Redis lost state that taskstate wrote.
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
        partitions: int | None = None,
        ttl: float | None = None,
        now: Any = None,
        version: int = 1,
        upgrade: Mapping[int, Upgrade] | None = None,
        open_at: str = "enter",
    ) -> None:
        self._ctx = current_context(ctx)
        self._ident = ident = identity(self._ctx)
        check_batch(ident, component)
        self._open_at_exit = open_at_exit(open_at, component)
        parts = parts_for(
            ident,
            self._ctx.getLocalProperty,
            ttl=ttl,
            now=now,
            version=version,
            upgrade=upgrade,
            component=component,
            namespace=namespace,
            sidecar=sidecar,
            mode=mode,
            durability=durability,
            codec=codec,
            partitions=partitions,
        )
        self.config = c = parts.config
        self.task_id = parts.task_id
        self._codec = parts.codec
        self._schema = parts.schema
        self._transport = parts.transport
        self._claims = parts.claims
        self._reads = parts.reads
        self.phase = Phase.CREATED
        self._session: Session | None = None
        self._data: dict[str, Any] = {}
        # mirror mode with the whole state here: a key not in _data does not exist
        self._complete = False
        self._absent: set[str] = set()  # keys known not to exist (remote, on demand)
        # entered without an Open (open_at="exit"): this process's session of an earlier attempt
        self._waiting: Session | None = None
        self._block = Block(parts.committer, parts.schema, ident, self._ctx, c.mode == "mirror")
        self._written = self._block.changes.written  # the hot paths below skip an attribute
        self._snap = self._block.changes.snap

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
        """What the last successful `commit(position)` passed, or None: resume after it."""
        s = self._require_session()
        if s.position is None:
            return None
        return self._codec.decode(self.task_id, "<position>", s.position)

    def _require_session(self) -> Session:
        if self._waiting is not None:
            return self._open_waiting()
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
        prior = sessions.get(self.task_id) if self._open_at_exit else None
        if prior is not None and self._claims.can_wait(prior):
            prior.active = True  # (no nested block of the task meanwhile)
            self._waiting = prior  # a block that only writes: OpenCommit at its exit
        else:
            self._take()
        self.phase = Phase.OPEN
        return self

    def _take(self) -> Session:
        session = take(self.task_id, self._claims, self.config)
        self._session = session
        self._data = session.data if session.data is not None else {}
        if self.config.mode == "mirror":
            self._complete = session.complete
            self._absent = session.absent
        return session

    def _stop_waiting(self) -> Session:
        prior = self._waiting
        assert prior is not None  # noqa: S101 - only called while waiting
        prior.active, self._waiting = False, None
        return prior

    def _open_waiting(self) -> Session:
        """Open a block that entered without: its writes so far go on the state it finds."""
        written, _ = self._data, self._stop_waiting()
        try:
            session = self._take()
        except BaseException:  # refused (fenced, ahead...): the block has failed
            self.phase, self._data = Phase.FAILED, {}
            self._block.changes.clear()
            raise
        self._data.update(written)
        self._absent.difference_update(written)
        return session

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        if self._waiting is not None:
            if exc_type is not None:  # never opened: nothing to discard but the writes
                self._discard_waiting()
                return False
            if self._exit_in_one_call(self._waiting):
                return False
            self._open_waiting()  # over one message: opened, then committed as any block
        session = self._session
        if session is None:
            return False
        try:
            if exc_type is None and self.phase is Phase.OPEN:
                if not self._block.defer(session, self._data):
                    self.commit()
                self.phase = Phase.CLOSED
            else:
                self._discard(session)
        except BaseException:
            self._discard(session)
            raise
        finally:
            session.active = False
            session.blocks += 1
        return False

    def _exit_in_one_call(self, prior: Session) -> bool:
        """Open and commit a block that only wrote in one call (False: over one message)."""
        try:
            session = self._block.open_commit(self._claims, prior, self._data)
        except BaseException:
            self._discard_waiting()
            raise
        if session is None:
            return False
        self._stop_waiting()
        self._session, self.phase = session, Phase.CLOSED
        return True

    def _discard_waiting(self) -> None:
        self._stop_waiting()
        self.phase, self._data = Phase.FAILED, {}
        self._block.changes.clear()

    def _discard(self, session: Session) -> None:
        self.phase = Phase.FAILED
        self._block.discard(session)
        self._data = {}

    # -- commit -----------------------------------------------------------------

    def commit(self, position: Any = MISSING) -> None:
        """Commit what changed since the last commit, atomically, fenced by the epoch.

        Called by `__exit__`; call it yourself for checkpoints in long batch tasks. With
        `position` (any JSON value), a resumed attempt reads it back as `s.position` and
        continues after it.
        """
        session = self._require_open()
        pos = None
        if position is not MISSING:
            pos = self._codec.encode(self.task_id, "<position>", position)
        self._block.commit(session, self._data, pos)

    # -- MutableMapping -----------------------------------------------------------

    def _lookup(self, key: str) -> Any:
        value = self._data.get(key, MISSING)
        if value is not MISSING or self._complete:
            return value
        if key in self._absent or not isinstance(key, str):
            return MISSING
        if self._waiting is not None:  # opened here: the state it finds may hold the key
            self._open_waiting()
            return self._lookup(key)
        session = self._require_open()
        if self.config.mode != "mirror":
            return self._reads.lookup(self._data, self._absent, key, session.epoch)
        value = self._reads.miss(session, self._data, self._absent, key)
        if value is LOAD_REST:
            self._load_rest(session)
            return self._data.get(key, MISSING)
        return value

    def _load_rest(self, session: Session) -> None:
        """On-demand reads: bring the rest of the committed state here (mirror mode)."""
        self._claims.load_rest(session, self._written)
        assert session.data is not None  # noqa: S101 - load_rest fills it
        self._data = session.data
        self._complete = True

    def prefetch(self, keys: Iterable[Any]) -> None:
        """Read `keys` now, in as few round trips as the message size allows.

        For a block that reads many keys (the keys of a pandas frame, say) on a worker
        that holds only part of the state: each key it would read one by one is one round
        trip. A no-op when the worker holds the whole state; keys that are not strings
        are skipped. In remote mode, the values are kept for this block.
        """
        session = self._require_open()
        if self._complete:
            return
        self._reads.fetch(session, self._data, self._absent, keys, self.config.mode == "mirror")

    def get_many(self, keys: Iterable[Any]) -> dict[str, Any]:
        """The values of those `keys` that exist, read in as few round trips as possible.

        Like `{k: s[k] for k in keys if k in s}` after `prefetch(keys)`: a dict or list
        read here and changed in place is committed too.
        """
        keys = list(keys)
        self.prefetch(keys)
        return {k: self[k] for k in keys if k in self}

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, MISSING)
        if value is MISSING:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default` (Mapping.get without the KeyError round trip)."""
        if self.phase is not Phase.OPEN:
            self._require_open()
        value = self._data.get(key, MISSING)
        if value is MISSING:
            if self._complete:
                return default
            value = self._lookup(key)
            if value is MISSING:
                return default
        if value.__class__ not in SCALARS:
            if value.__class__ is bytes:  # as a restore left it: decoded on first read
                value = self._schema.decode_stored(self.task_id, key, value)
                self._data[key] = value
            if is_mutable(value) and key not in self._written and key not in self._snap:
                self._snap[key] = self._codec.encode(self.task_id, key, value)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if self.phase is not Phase.OPEN:
            self._require_open()
        now = self._session.now_ms if self._session is not None else 0
        self._block.assign(self._data, self._absent, key, value, NO_TTL, now)

    def set(self, key: str, value: Any, *, ttl: float | None | Any = NO_TTL) -> None:
        """`s[key] = value` with this key's own time to live in seconds (None: never)."""
        session = self._require_open()
        self._block.assign(self._data, self._absent, key, value, ttl, session.now_ms)

    def __delitem__(self, key: str) -> None:
        self._require_open()
        if self._lookup(key) is MISSING:
            raise KeyError(key)
        del self._data[key]
        if not self._complete:
            self._absent.add(key)
        self._written[key] = None

    def __contains__(self, key: object) -> bool:
        if self.phase is not Phase.OPEN:
            self._require_open()
        return isinstance(key, str) and self._lookup(key) is not MISSING

    def __iter__(self) -> Iterator[str]:
        session = self._require_open()
        if self.config.mode == "mirror":
            if not self._complete:
                self._load_rest(session)
            return iter(self._data)
        stored = self._reads.keys(self._require_open().epoch)
        gone = {k for k, v in self._written.items() if v is None}
        extra = [k for k in self._data if k not in set(stored)]
        return iter([k for k in stored if k not in gone] + extra)

    def __len__(self) -> int:
        keys = iter(self)  # (mirror mode: the whole state here, in _data)
        return len(self._data) if self.config.mode == "mirror" else sum(1 for _ in keys)

    def __repr__(self) -> str:
        return f"TaskState({self.task_id!r}, mode={self.config.mode!r}, phase={self.phase.value})"
