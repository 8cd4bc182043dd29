"""How a block finds values it does not hold: remote mode's reads through the sidecar.

Mirror mode holds the state in the session's dict and never reads here. Remote mode
reads each missing key through the sidecar (fenced by the epoch, so a newer attempt's
state is never read), remembering the values and the keys found absent for the block;
iteration lists the committed keys with a Restore stream of keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taskstate.proto import taskstate_pb2 as pb

from ._changes import MISSING
from ._codec import JsonCodec
from ._transport import GrpcTransport


class Reads:
    """A block's reads that go through the sidecar (remote mode)."""

    __slots__ = ("absent", "codec", "pb_task", "task_id", "transport")

    def __init__(
        self,
        task_id: str,
        transport: GrpcTransport,
        codec: JsonCodec,
        pb_task: Callable[[], pb.TaskId],
    ) -> None:
        self.task_id = task_id
        self.transport = transport
        self.codec = codec
        self.pb_task = pb_task
        self.absent: set[str] = set()  # keys known not to exist

    def lookup(self, data: dict[str, Any], key: str, epoch: int) -> Any:
        """The committed value of `key` (MISSING if absent), kept in `data` once read."""
        if key in self.absent or not isinstance(key, str):
            return MISSING
        r = self.transport.multi_get(
            pb.GetRequest(task=self.pb_task(), epoch=epoch, keys=[key]), self.task_id
        )
        found = r.values[0]
        if not found.found:
            self.absent.add(key)
            return MISSING
        value = self.codec.decode(self.task_id, key, found.value)
        data[key] = value
        return value

    def keys(self, epoch: int) -> list[str]:
        """Every committed key, as the sidecar lists them."""
        keys: list[str] = []

        def on_chunk(chunk: pb.RestoreChunk) -> None:
            keys.extend(e.key for e in chunk.entries)

        self.transport.restore(
            pb.RestoreRequest(task=self.pb_task(), epoch=epoch),
            self.task_id,
            on_chunk,
            keys.clear,
        )
        return keys
