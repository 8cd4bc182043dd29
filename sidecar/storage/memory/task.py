"""One task's state in process memory: its data, metadata, rollback record and change log.

As the Redis backend keeps them in a task's hashes (redis/keys.py), with the same rules
for the change log (lua/commit.lua) and for keys that expire (lua/open.lua): a value
written with a time to live carries it in its envelope (taskstate/proto/envelope.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taskstate.proto import envelope
from taskstate.proto.ids import split_attempt
from taskstate.proto.versions import new_generation, token

from ..values import LOG_FRACTION, LOG_MIN

_ABSENT = None
_SUPERSEDED_MAX = 32  # as open.lua


def _chunks(items: list[tuple[str, bytes]], n: int) -> list[list[tuple[str, bytes]]]:
    """`items` in chunks of at most `n` (as restore and read yield them)."""
    n = max(n, 1)
    return [items[i : i + n] for i in range(0, len(items), n)]


@dataclass
class _Task:
    data: dict[str, bytes] = field(default_factory=dict)
    epoch: int = 0
    batch: int = -1
    position: bytes | None = None
    gen: str = field(default_factory=new_generation)
    ver: int = 0
    codec: str = ""
    undo: dict[str, bytes | None] = field(default_factory=dict)
    undo_copy: dict[str, bytes] | None = None  # "copy" mode: the data before the batch
    undo_n: int = 0  # "copy" mode: keys written by the batch (counted per commit)
    undo_batch: int | None = None
    prev_batch: int = -1
    prev_position: bytes | None = None
    updated_at: float = 0.0
    last_writer: str = ""
    rollbacks: int = 0
    claim: str | None = None  # the attempt that owns the epoch (None: unnamed)
    claim_batch: int | None = None
    superseded: list[str] = field(default_factory=list)  # the last _SUPERSEDED_MAX
    done: tuple[int, str] | None = None  # (batch, attempt) the plugin's flush finished
    # a finished batch a late attempt of the same application rolled back (open.lua's
    # stash): (batch, generation, data, position)
    stash: tuple[int, str, dict[str, bytes], bytes | None] | None = None
    # the change log, as lua/commit.lua keeps it: version -> the keys it changed;
    # complete for versions (log_floor, ver] when log_ver == ver; log_n keys in all
    log: dict[int, list[str]] = field(default_factory=dict)
    log_batch: dict[int, int] = field(default_factory=dict)  # version -> the batch that wrote it
    log_floor: int = 0
    log_floor_batch: int | None = -1  # the batch of the state at log_floor (None: unknown)
    log_ver: int | None = None
    log_n: int = 0
    partitions: int | None = None  # the count recorded at the first Open declaring one
    # operators' edits to apply again at the first Open of a batch after edit_batch
    edits: dict[str, bytes | None] = field(default_factory=dict)
    edit_batch: int | None = None
    # expiry (lua/open.lua): the batch whose now is fixed, that now (epoch ms), and
    # "event" once a block passed an event time
    now_batch: int | None = None
    now_ms: int = 0
    time: str = ""

    @property
    def version(self) -> str:
        return token(self.gen, self.ver)


def launched_before(attempt: str, claim: str | None) -> bool:
    """Spark launched `attempt` before `claim` (both SCOPE:N of one application), as open.lua."""
    a, c = split_attempt(attempt), split_attempt(claim or "")
    return a is not None and c is not None and a[0] == c[0] and a[1] < c[1]


def same_application(attempt: str, other: str) -> bool:
    """Two attempt ids (SCOPE:N) of one application, as open.lua tells them."""
    a, o = split_attempt(attempt), split_attempt(other)
    return a is not None and o is not None and a[0] == o[0]


def _restore_stash(t: _Task) -> None:
    """The first claim of a later batch makes the stashed finished batch the state (open.lua)."""
    assert t.stash is not None  # noqa: S101 - the caller checked
    batch, gen, data, position = t.stash
    t.stash = None
    if gen != t.gen:
        return  # a rescale, import or seed came between
    t.data = data
    t.batch = batch
    t.position = position
    t.undo, t.undo_copy, t.undo_batch = {}, None, None
    _restart_log(t, t.ver + 1, batch)
    t.log_ver = t.ver + 1
    t.ver += 1


def _log(t: _Task, keys: list[str], batch: int) -> None:
    """A new version that changed `keys`, in the change log if it covers the last one."""
    if t.log_ver == t.ver:
        t.log[t.ver + 1] = keys
        t.log_batch[t.ver + 1] = batch
        t.log_n += len(keys)
        t.log_ver = t.ver + 1
    t.ver += 1


def _restart_log(t: _Task, floor: int, floor_batch: int) -> None:
    """The log starts afresh: it covers versions after `floor` (the state of `floor_batch`)."""
    t.log, t.log_batch, t.log_floor, t.log_n = {}, {}, floor, 0
    t.log_floor_batch = floor_batch


def _apply_edits(t: _Task, batch: int) -> None:
    """Apply the kept edits again (lua/open.lua) at `batch`, and forget them."""
    for k, v in t.edits.items():
        if v is None:
            t.data.pop(k, None)
        else:
            t.data[k] = v
    if t.edits:
        _log(t, list(t.edits), batch)
    t.edits, t.edit_batch = {}, None


def _log_commit(t: _Task, keys: list[str], batch: int, before: int) -> None:
    """Log a commit's keys at the version it makes, trimmed as lua/commit.lua does.

    `batch`: the commit's batch (-1 in a batch job); `before`: the batch before it.
    """
    if t.log_ver != t.ver:
        _restart_log(t, t.ver, before)
    new = t.ver + 1
    t.log[new] = keys
    t.log_batch[new] = batch
    t.log_n += len(keys)
    t.log_ver = new
    limit = max(LOG_MIN, (len(t.data)) // LOG_FRACTION)
    while t.log_n > limit and t.log_floor < new:
        t.log_floor += 1
        t.log_n -= len(t.log.pop(t.log_floor, []))
        t.log_floor_batch = t.log_batch.pop(t.log_floor, None)


def expire(t: _Task, batch: int | None, now_ms: int) -> int:
    """Delete the keys whose expiry is at or before `now_ms`, as lua/open.lua does.

    In a streaming batch it is a write of that batch: its rollback record holds them, so
    a replay restores them (and expires them again). A version in the change log.
    """
    gone = [k for k, v in t.data.items() if envelope.expired(v, now_ms)]
    if not gone:
        return 0
    if batch is not None:
        if t.batch != batch or t.undo_batch != batch:
            t.undo, t.undo_copy, t.undo_n = {}, None, 0
            t.undo_batch, t.prev_batch, t.prev_position = batch, t.batch, t.position
            t.batch = batch
        for k in gone:
            if t.undo_copy is None:
                t.undo.setdefault(k, t.data[k])
    for k in gone:
        del t.data[k]
    _log(t, gone, -1 if batch is None else batch)
    return len(gone)
