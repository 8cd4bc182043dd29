"""Calls to a sidecar over its wire (`_wires`): deadlines, retries and errors, written once.

Whichever wire carries a call, a failed one ends as `CallFailed`, turned here into a
`TaskStateError` (`translate`), and a sidecar that cannot be reached is waited for and
retried for TASKSTATE_RETRY_DEADLINE. This module and `_wires` are the only places where
grpc types exist on the client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
from tenacity import Retrying, retry_if_exception_type, stop_after_delay
from tenacity import wait_random_exponential as _jitter

from taskstate.proto import taskstate_pb2 as pb

from ._errors import (
    ERROR_BY_CODE,
    ConfigError,
    LimitError,
    SidecarUnavailableError,
    TaskStateError,
)
from ._security import SidecarSecurity
from ._wires import CallFailed, GrpcWire, LaneWire, failed_call, new_wire, wire_for
from .address import address

_PLAIN = SidecarSecurity()
T = TypeVar("T")
_UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.CANCELLED)  # fmt: skip
NOT_GRPC = "Failed parsing HTTP/2"  # what gRPC says of a socket that answers something else
# how far past the retry deadline a call may wait for its sidecar (a retry's backoff, up
# to 1 s, may start an attempt about that late anyway)
_OVERSHOOT_S = 1.0


# what an operator does about a sidecar that does not answer (every such error says it)
_CHECK_THE_SIDECAR = (
    "Operator action: check that the sidecar runs beside this executor (`taskstate sidecar "
    "...` or the executor plugin) and that TASKSTATE_SIDECAR points at it."
)


def translate(failed: CallFailed, task: str | None, target: str) -> TaskStateError:
    """The TaskStateError of a failed call (once, here)."""
    status, details, ts_code = failed.status, failed.details, failed.code
    if ts_code in ERROR_BY_CODE:
        return ERROR_BY_CODE[ts_code](details or ts_code, task)
    where = f"task {task}: " if task else ""
    target = address(target)
    if NOT_GRPC in details:
        return ConfigError(
            f"{where}{target} is not a taskstate sidecar (it does not speak gRPC: "
            f"{details}); point at the sidecar's --listen address",
            task,
        )
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return LimitError(
            f"{where}the request was refused as too large ({details}). Commit more often, "
            "or raise TASKSTATE_MAX_MESSAGE_BYTES and the sidecar's --max-message-bytes "
            "together.",
            task,
        )
    if status in _UNAVAILABLE:
        return SidecarUnavailableError(
            f"{where}the sidecar at {target} did not answer ({status.name}: {details}). "
            + _CHECK_THE_SIDECAR,
            task,
        )
    if status == grpc.StatusCode.UNIMPLEMENTED:
        return TaskStateError(
            f"{where}the sidecar at {target} does not implement this call ({details}). "
            "Operator action: run the sidecar (image or chart) of the client's version.",
            task,
        )
    return TaskStateError(f"{where}sidecar call failed ({status}: {details})", task)


class _RetryableError(Exception):
    """Internal: a failure that is safe to retry (the sidecar was not reachable)."""

    def __init__(self, error: TaskStateError) -> None:
        super().__init__(error)
        self.error = error


class Transport:
    """Calls to one sidecar with a deadline each, retried while it cannot be reached.

    Every call is idempotent (commits carry absolute values and an epoch), so a call is
    retried for `retry_deadline_s` while the sidecar does not answer (0: never).
    `unavailable` words the error of a sidecar that did not answer (a task's says where
    its sidecar should run). `own`: a wire of its own, closed by `close`, rather than the
    one the process shares.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout_s: float,
        retry_deadline_s: float,
        max_message_bytes: int,
        security: SidecarSecurity = _PLAIN,
        unavailable: Callable[[CallFailed, str | None], TaskStateError] | None = None,
        own: bool = False,
    ) -> None:
        self.target = target
        self.security = security
        self.timeout_s = timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.max_message_bytes = max_message_bytes
        self._unavailable = unavailable
        self._own = new_wire(target, max_message_bytes, security) if own else None

    @property
    def wire(self) -> GrpcWire | LaneWire:
        """The transport's own wire, else the process's (made again after a fork)."""
        return self._own or wire_for(self.target, self.max_message_bytes, self.security)

    def close(self) -> None:
        """Close the transport's own wire (the process's stay open)."""
        if isinstance(self._own, LaneWire):
            self._own.close()
        elif self._own is not None:
            self._own.channel.close()

    @property
    def grpc_wire(self) -> GrpcWire:
        """The gRPC wire, for what only gRPC carries (health, Attach)."""
        wire = self.wire
        return wire.grpc_wire if isinstance(wire, LaneWire) else wire

    def _error(self, failed: CallFailed, task: str | None) -> TaskStateError:
        err = translate(failed, task, self.target)
        if type(err) is SidecarUnavailableError and self._unavailable is not None:
            return self._unavailable(failed, task)
        return err

    def grpc_error(self, exc: grpc.RpcError, task: str | None) -> TaskStateError:
        """The TaskStateError of a call made over the gRPC channel directly."""
        return self._error(failed_call(exc), task)

    def _reached(self, task: str | None, wait_s: float) -> None:
        """Wait at most `wait_s` for gRPC to reach the sidecar.

        A call waits for an unreachable sidecar (`wait_for_ready`) as long as its own
        deadline: where that would end more than a second after the retry deadline, the
        wait is bounded by what is left of it, so that TASKSTATE_RETRY_DEADLINE bounds how
        long a task waits for a sidecar that is not there.
        """
        if self.timeout_s - wait_s <= _OVERSHOOT_S:
            return  # the defaults (30 s and 30 s): the call's own wait ends in time
        if not self.grpc_wire.reached(wait_s):
            where = f"task {task}: " if task else ""
            raise _RetryableError(
                SidecarUnavailableError(
                    f"{where}the sidecar at {address(self.target)} could not be reached within "
                    f"TASKSTATE_RETRY_DEADLINE ({self.retry_deadline_s:g} s). "
                    + _CHECK_THE_SIDECAR,
                    task,
                )
            )

    def retrying(self, task: str | None, fn: Callable[[float], T]) -> T:
        """`fn(wait_s)`, retried while the sidecar is unreachable, for the retry deadline.

        `wait_s`: what is left of the retry deadline, the longest `fn` may wait for the
        sidecar to be reachable.
        """
        give_up = time.monotonic() + self.retry_deadline_s

        def attempt() -> T:
            try:
                return fn(give_up - time.monotonic())
            except CallFailed as failed:
                err = self._error(failed, task)
                if isinstance(err, SidecarUnavailableError):
                    raise _RetryableError(err) from None
                raise err from None

        try:
            for a in Retrying(
                retry=retry_if_exception_type(_RetryableError),
                stop=stop_after_delay(self.retry_deadline_s),
                wait=_jitter(multiplier=0.05, max=1.0),
                reraise=True,
            ):
                with a:
                    return attempt()
        except _RetryableError as exc:
            raise exc.error from None
        raise AssertionError("unreachable")  # pragma: no cover

    def unary(self, method: str, request: Any, task: str | None) -> Any:
        """A unary call, retried while the sidecar is unreachable."""

        def run(wait_s: float) -> Any:
            if self.retry_deadline_s:
                self._reached(task, wait_s)
            return self.wire.unary(method, request, self.timeout_s, self.retry_deadline_s > 0)

        return self.retrying(task, run)

    def stream(self, method: str, request: Any, task: str | None) -> Iterator[Any]:
        """A server stream's messages as they come, not retried (see `restore`).

        The whole has no deadline (a large read takes a while); on the lane, each message
        must come within the call timeout of the one before.
        """
        try:
            yield from self.wire.stream(
                method, request, self.timeout_s, whole=False, wait=self.retry_deadline_s > 0
            )
        except CallFailed as failed:
            raise self._error(failed, task) from None

    def open(self, req: pb.OpenRequest, task: str) -> pb.OpenResponse:
        """Open (claim) a task."""
        r: pb.OpenResponse = self.unary("Open", req, task)
        return r

    def commit(self, req: pb.CommitRequest, task: str) -> pb.CommitResponse:
        """Commit one change set."""
        r: pb.CommitResponse = self.unary("Commit", req, task)
        return r

    def open_commit(self, req: pb.OpenCommitRequest, task: str) -> pb.OpenCommitResponse:
        """Open, then commit under the epoch it gave (a block that only wrote)."""
        r: pb.OpenCommitResponse = self.unary("OpenCommit", req, task)
        return r

    def describe(self, req: pb.DescribeRequest, task: str) -> pb.TaskInfo:
        """Describe a task."""
        r: pb.TaskInfo = self.unary("Describe", req, task)
        return r

    def read(
        self,
        req: pb.ReadRequest,
        task: str,
        on_chunk: Callable[[pb.ReadChunk], None],
        on_reset: Callable[[], None],
    ) -> pb.ReadChunk:
        """A task attempt's Read, chunk by chunk into `on_chunk` (nothing is buffered here).

        Read to its end at once, within the call timeout. If the sidecar goes away midway,
        `on_reset` discards what arrived and the read starts again, within the retry
        deadline. Returns the last chunk (the version read).
        """

        def run(wait_s: float) -> pb.ReadChunk:
            self._reached(task, wait_s)
            on_reset()
            chunk: pb.ReadChunk
            for chunk in self.wire.stream("Read", req, self.timeout_s, whole=True, wait=True):
                on_chunk(chunk)
                if chunk.last:
                    return chunk
            raise CallFailed(None, None, "the read ended without its last chunk")

        return self.retrying(task, run)

    def attach(self, requests: Iterator[pb.AttachMessage]) -> Iterator[pb.AttachOrder]:
        """The Attach stream (no deadline, no retry: `_attach.Attachment` handles its end)."""
        try:
            yield from self.grpc_wire.stub.Attach(requests, wait_for_ready=True)
        except grpc.RpcError as exc:
            raise self.grpc_error(exc, None) from None
