"""This process's Attach stream to a sidecar: deferrals, FLUSH and DISCARD orders.

A daemon thread serves the stream (sidecar/flush.py has the protocol). When the stream
ends while this process holds changes (the executor plugin restarts a killed sidecar),
`Buffer.reattach` attaches again and names the attempts it holds, and those it answered a
FLUSH for on the old stream (the answer may have died with the old sidecar). The new
sidecar adopts those its predecessor's journal names for this process, so their FLUSH
comes here as before, and says which in ATTACHED; the process commits the rest itself.
A hello names everything this process holds for that sidecar, so the sidecar forgets
whatever else it thought this process held. There is one stream per sidecar at a time
(`Buffer._attachment`), so one stream adopts.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from taskstate.proto import taskstate_pb2 as pb

from ._transport import Transport

if TYPE_CHECKING:
    from ._buffer import Buffer

log = logging.getLogger("taskstate.client")

Order = pb.AttachOrder

ANSWERS_KEPT = 64  # FLUSH answers kept, to give again on a new stream


class Attachment:
    """This process's Attach stream to one sidecar, served by a daemon thread."""

    def __init__(
        self, transport: Transport, buffer: Buffer, held: tuple[int, ...] | None = None
    ) -> None:
        self.transport = transport
        self.buffer = buffer
        # named in the hello: attempts registered on an earlier stream
        self.held = held or ()
        # attempts whose FLUSH this stream answered: the answer may die with the sidecar
        self.answered: deque[int] = deque(maxlen=ANSWERS_KEPT)
        # attempts registered here and not yet flushed or discarded
        self.live: set[int] = set()
        self.pid = os.getpid()
        self.worker = ""
        self.adopted: set[int] = set()  # of `held`, what the sidecar took over
        self.broken = False
        self._out: queue.Queue[pb.AttachMessage | None] = queue.Queue()
        self._ids = itertools.count(1)
        self._acks: dict[int, threading.Event] = {}
        self._attached = threading.Event()
        self._thread = threading.Thread(target=self._run, name="taskstate-attach", daemon=True)
        self._thread.start()

    def _requests(self) -> Iterator[pb.AttachMessage]:
        yield pb.AttachMessage(hello=pb.AttachHello(pid=self.pid, held=self.held))
        while (msg := self._out.get()) is not None:
            yield msg

    def _run(self) -> None:
        try:
            for order in self.transport.attach(self._requests()):
                if order.kind == Order.ATTACHED:
                    self.adopted = set(order.adopted)
                    if self.held:
                        self.buffer.attached_again(self)
                    self.worker = order.worker
                    self._attached.set()
                elif order.kind == Order.DEFERRED:
                    ack = self._acks.pop(order.request_id, None)
                    if ack is not None:
                        ack.set()
                elif order.kind == Order.FLUSH:
                    answer = self.buffer.flush(order.task_attempt)
                    self.answered.append(order.task_attempt)
                    self.live.discard(order.task_attempt)
                    for msg in answer:
                        self._out.put(msg)
                elif order.kind == Order.DISCARD:
                    self.live.discard(order.task_attempt)
                    self.buffer.discard(order.task_attempt)
        except Exception as exc:  # the stream ended: the sidecar went away or refused it
            log.warning("taskstate: the Attach stream to %s ended: %s", self.transport.target, exc)
        finally:
            self.broken = True
            self._attached.set()
            for ack in list(self._acks.values()):
                ack.set()
        if self.worker and (self.live or self.answered or self.held):
            self.buffer.reattach(self.transport)  # it had attached: the sidecar may wait for us

    def attached(self, timeout_s: float) -> bool:
        """Wait for the sidecar's ATTACHED; False when the stream ended first."""
        return self._attached.wait(timeout_s) and not self.broken

    def register(self, attempt: int, timeout_s: float) -> bool:
        """Have the sidecar record that this process holds changes of `attempt`."""
        if not self._attached.wait(timeout_s) or self.broken:
            return False
        request_id = next(self._ids)
        ack = threading.Event()
        self._acks[request_id] = ack
        self.live.add(attempt)  # the sidecar may journal it before this stream ends
        self._out.put(
            pb.AttachMessage(defer=pb.DeferRequest(request_id=request_id, task_attempt=attempt))
        )
        return ack.wait(timeout_s) and not self.broken
