"""The Python workers' call: Attach, the stream that carries deferred group commits.

The protocol itself (which worker holds which attempt's changes, the executor plugin's
barrier) lives in sidecar/flush.py; this only serves the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from taskstate.proto import codes
from taskstate.proto import taskstate_pb2 as pb

from ..errors import SidecarError
from ..flush import FlushCoordinator
from .guard import current_grant


class FlushRpcs:
    """taskstate.v1.TaskStateService's Attach over the flush coordinator (if any)."""

    def __init__(self, flush: FlushCoordinator | None) -> None:
        self.flush = flush  # None: no executor plugin barrier, every commit is synchronous

    async def Attach(  # noqa: N802
        self, requests: AsyncIterator[pb.AttachMessage]
    ) -> AsyncIterator[pb.AttachOrder]:
        """One worker's stream of deferrals, flush orders and their results."""
        if self.flush is None:
            raise SidecarError(
                codes.CONFIG,
                "Attach: this sidecar has no flush barrier (it runs without the executor "
                "plugin); commit each block instead.",
            )
        grant = current_grant()
        async for order in self.flush.attach(requests, grant.allows if grant else None):
            yield order
