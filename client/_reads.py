"""How a block finds values it does not hold: reads through the sidecar, one key or many.

Mirror mode holds the state in the session's dict. After Open on a worker that holds no
copy of the task (a new or restarted worker, a copy evicted from the cache, a change log
that no longer covers the copy), it holds nothing and reads what the block touches, on
demand (`TASKSTATE_LOAD=on-demand`, the default): one key at a time, or many in one round
trip through `TaskState.prefetch` / `get_many`; what it read stays in the session for
the rest of the attempt, and its next batches on this worker. Iteration and `len()` need
the whole state and load the rest first, as does an attempt that keeps reading single
keys: once its misses have cost as long as restoring the whole state would (`worth_loading`),
it restores the rest, so it never pays much more than twice the cheaper of the two.
Remote mode reads every key it does not hold through the sidecar, for the block only.

Every read is fenced by the epoch in the same script that reads (get.lua): a newer
attempt's state is never read by an older attempt; the older one gets FencedError.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from taskstate.proto import chunks
from taskstate.proto import taskstate_pb2 as pb

from ._changes import MISSING
from ._schema import Schema
from ._transport import Transport
from ._wire import name_bad_utf8, text_pairs

# A page of an on-demand read: at most this many keys, and about `budget` bytes of values
# (1,000 keys while the size of the state's values is not known yet).
PAGE_KEYS = 10_000
FIRST_PAGE_KEYS = 1_000
# Single-key misses load the rest of the state past MISS_MIN, once they took as long as
# restoring the whole state would (its size x this process's measured seconds per key
# restored), or past size / MISS_FRACTION whatever they took. A miss is one round trip,
# whose time varies several-fold with the executor's load, so timing misses, not counting
# them, decides.
MISS_MIN = 64
MISS_FRACTION = 128
RESTORE_SECONDS_PER_KEY = 2.5e-6  # until this process has timed a restore of its own
_restore_rate = [RESTORE_SECONDS_PER_KEY]
# What `Reads.miss` answers when the attempt's misses have cost as much as restoring the
# whole state would: load the rest of the state instead of this one key.
LOAD_REST: Any = object()

if TYPE_CHECKING:
    from ._session import Session


def note_restore(keys: int, seconds: float) -> None:
    """Time a whole restore of `keys` keys (the estimate `worth_loading` uses)."""
    if keys >= 1_000:  # a small one times the round trip more than the keys
        _restore_rate[0] = (_restore_rate[0] + seconds / keys) / 2


def worth_loading(misses: int, miss_seconds: float, size: int) -> bool:
    """Whether an attempt that missed `misses` keys (in `miss_seconds`) loads the rest."""
    if misses <= MISS_MIN:
        return False
    return misses > size // MISS_FRACTION or miss_seconds >= size * _restore_rate[0]


class Reads:
    """A block's reads that go through the sidecar."""

    __slots__ = ("budget", "json", "pb_task", "schema", "task_id", "transport")

    def __init__(
        self,
        task_id: str,
        transport: Transport,
        schema: Schema,
        pb_task: Callable[[], pb.TaskId],
        budget: int,
    ) -> None:
        self.task_id = task_id
        self.transport = transport
        self.schema = schema  # decodes (and upgrades) what it reads
        self.json = schema.fast_json
        self.pb_task = pb_task
        self.budget = budget

    def lookup(self, data: dict[str, Any], absent: set[str], key: str, epoch: int) -> Any:
        """The committed value of `key` (MISSING if absent), kept in `data` once read."""
        self._decode_into(data, absent, [key], self._page([key], epoch))
        return data.get(key, MISSING)

    def miss(self, session: Session, data: dict[str, Any], absent: set[str], key: str) -> Any:
        """A key a mirror-mode session reading on demand does not hold.

        Its committed value (MISSING if absent), read through the sidecar; or LOAD_REST
        once the attempt's misses are worth a restore of the rest (`worth_loading`).
        """
        session.misses += 1
        if worth_loading(session.misses, session.miss_seconds, session.info.size):
            return LOAD_REST
        t0 = time.perf_counter()
        value = self.lookup(data, absent, key, session.epoch)
        session.miss_seconds += time.perf_counter() - t0
        return value

    def fetch(
        self,
        session: Session,
        data: dict[str, Any],
        absent: set[str],
        keys: Iterable[Any],
        mirror: bool,
    ) -> None:
        """Read the `keys` held neither in `data` nor in `absent`, in pages; into both.

        In mirror mode, the bytes per key seen become the session's `entry_bytes` when it
        had none yet (`_cache.size_of`).
        """
        epoch, entry_bytes = session.epoch, session.entry_bytes
        want = [
            str(k)  # numpy's str_ (a pandas column's values) is a str too
            for k in dict.fromkeys(keys)
            if isinstance(k, str) and k not in data and k not in absent
        ]
        read_keys = read_bytes = 0
        i = 0
        while i < len(want):
            size = entry_bytes or (read_bytes / read_keys if read_keys else 0.0)
            n = PAGE_KEYS if size else FIRST_PAGE_KEYS
            if size:
                n = max(1, min(n, int(self.budget // (2 * size + 32))))
            page = want[i : i + n]
            i += len(page)
            values = self._page(page, epoch)
            read_keys += len(page)
            read_bytes += sum(len(k) + len(v) for k, v in zip(page, values, strict=True) if v)
            self._decode_into(data, absent, page, values)
        if mirror and not entry_bytes:
            session.entry_bytes = read_bytes / read_keys if read_keys else 0.0

    def _page(self, keys: list[str], epoch: int) -> list[bytes | None]:
        """The stored values of `keys` (None: absent), in one Read."""
        req = pb.ReadRequest(task=self.pb_task(), epoch=epoch, packed_keys=chunks.pack(keys))
        found: dict[str, bytes] = {}

        def on_chunk(chunk: pb.ReadChunk) -> None:
            found.update(zip(*text_pairs(self.task_id, chunk.packed), strict=True))

        self.transport.read(req, self.task_id, on_chunk, found.clear)
        return [found.get(k) for k in keys]

    def _decode_into(
        self,
        data: dict[str, Any],
        absent: set[str],
        keys: list[str],
        values: list[bytes | None],
    ) -> None:
        found = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        if len(found) < len(keys):
            absent.update(k for k, v in zip(keys, values, strict=True) if v is None)
        if self.json:
            try:
                data.update((k, orjson.loads(v)) for k, v in found)
                return
            except orjson.JSONDecodeError:
                pass  # the codec names the bad key
        name_bad_utf8(self.task_id, [x for k, v in found for x in (k.encode(), v)])
        decode = self.schema.decode
        for k, v in found:
            data[k] = decode(self.task_id, k, v)

    def keys(self, epoch: int) -> list[str]:
        """Every committed key, as the sidecar lists them."""
        keys: list[str] = []

        def on_chunk(chunk: pb.ReadChunk) -> None:
            keys.extend(text_pairs(self.task_id, chunk.packed)[0])

        req = pb.ReadRequest(task=self.pb_task(), epoch=epoch)
        self.transport.read(req, self.task_id, on_chunk, keys.clear)
        return keys
