"""One task attempt's claim, as this Python process holds it, and how it is taken.

A `Session` is what a process knows of a task after Open: the attempt it belongs to, the
fencing epoch, the committed version and (mirror mode) the state as of that version. The
sessions a process holds are cached in `_cache.py`; `Claims` (`_claims.py`) takes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class OpenInfo:
    """What entering the block found (`s.info`): for logs, metrics and tests.

    Attributes:
        epoch: The attempt's fencing epoch.
        committed_batch: The last committed batch before this one (-1: none).
        size: Keys in the committed state.
        version: The committed state's version token.
        rolled_back: This Open rolled back a replayed batch first.
        rolled_back_keys: Keys that rollback restored.
        restored: The state was read from the sidecar (not reused from this process).
        reused_claim: Another block of the same task attempt held the claim already.
        delta: The restore sent only what changed since the version this process held.
        restored_keys: Keys the restore sent (a delta's changed and deleted keys).
        on_demand: The block started without the state and reads the keys it touches.
        expired: Keys whose time to live had run out by the batch's now, deleted by this
            Open as a write of the batch (a replay restores and expires them again).
        now_ms: The batch's now, epoch ms: a key written with `ttl=T` expires at
            `now_ms + 1000 * T`.
        with_commit: The block only wrote: its Open went with its Commit in one call.
    """

    epoch: int
    committed_batch: int
    size: int
    version: str
    rolled_back: bool
    rolled_back_keys: int
    restored: bool
    reused_claim: bool
    delta: bool = False
    restored_keys: int = 0
    on_demand: bool = False
    expired: int = 0
    now_ms: int = 0
    with_commit: bool = False


def later_block(info: OpenInfo) -> OpenInfo:
    """What an attempt's later block in the same process finds: the claim, nothing read."""
    if info.reused_claim and not (
        info.restored or info.delta or info.restored_keys or info.on_demand
    ):
        return info  # so already (the attempt's third block on): nothing to allocate
    return replace(
        info, reused_claim=True, restored=False, delta=False, restored_keys=0, on_demand=False
    )


@dataclass
class Session:
    """A claim held by this process for one task attempt (cached: `_cache.sessions`)."""

    attempt_id: str  # SCOPE:N (client/_context.py): the same in every serving process
    batch: int | None
    epoch: int
    version: str
    data: dict[str, Any] | None
    position: bytes | None
    info: OpenInfo
    active: bool = False
    # encoded bytes per key of the state, as last restored or first committed (0: not
    # known yet): what `_cache.size_of` estimates the cached data's memory from
    entry_bytes: float = 0.0
    pid: int = field(default_factory=os.getpid)
    # `data` holds the whole state; else only the keys read or written so far (on-demand
    # reads), and `absent` the keys known not to be in the state
    complete: bool = True
    absent: set[str] = field(default_factory=set)
    misses: int = 0  # single-key reads since the session started reading on demand
    miss_seconds: float = 0.0  # and how long they took
    # the sidecar runs beside the executor plugin's flush barrier (`_buffer.py`)
    flush_barrier: bool = False
    blocks: int = 0  # blocks of this attempt that ended in this process
    # `data` holds changes of this attempt that are held for the flush, not committed
    deferred: bool = False
    # the batch's now (epoch ms, OpenResponse.now_ms): a key's expiry is now + its ttl
    now_ms: int = 0
    # the schema version `data` was decoded (and upgraded) for: code of another version
    # in this process reads the state again
    schema_version: int = 1


# A whole copy at most this many commits old is restored in full when the change log does
# not cover it (see `Claims.restore`); an older one reads on demand.
RECENT = 4
