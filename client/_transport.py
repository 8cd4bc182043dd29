"""gRPC to the sidecar: lazy, fork-safe channels, deadlines, retries, error translation.

This is the only place where grpc types exist on the client side: every `RpcError` is
turned into a `TaskStateError` here.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from taskstate.proto import codes, frames
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc

from ._errors import (
    ERROR_BY_CODE,
    ConfigError,
    LimitError,
    SidecarUnavailableError,
    TaskStateError,
)
from ._frames import FrameLane, FrameStatusError, LaneDownError, LaneUnreachableError
from ._security import SidecarSecurity
from .address import address

_PLAIN = SidecarSecurity()

T = TypeVar("T")

_lock = threading.Lock()
_pid = os.getpid()
_channels: dict[
    tuple[str, int, SidecarSecurity], tuple[grpc.Channel, pb_grpc.TaskStateServiceStub]
] = {}


def _stub(
    target: str, max_message_bytes: int, security: SidecarSecurity = _PLAIN
) -> pb_grpc.TaskStateServiceStub:
    """The stub of the process' channel to `target`."""
    return _channel(target, max_message_bytes, security)[1]


def _channel(
    target: str, max_message_bytes: int, security: SidecarSecurity = _PLAIN
) -> tuple[grpc.Channel, pb_grpc.TaskStateServiceStub]:
    """One channel per (process, target), with its stub.

    PySpark forks workers, and a channel made before a fork must not be used after it
    (like redis-py's ConnectionPool._checkpid).
    """
    global _pid
    with _lock:
        if os.getpid() != _pid:
            _channels.clear()  # the parent's channels: drop, never close, in the child
            _pid = os.getpid()
        key = (target, max_message_bytes, security)
        entry = _channels.get(key)
        if entry is None:
            channel = security.channel(
                target,
                [
                    ("grpc.max_send_message_length", max_message_bytes),
                    ("grpc.max_receive_message_length", max_message_bytes),
                    ("grpc.enable_retries", 0),
                ],
            )
            entry = (channel, pb_grpc.TaskStateServiceStub(channel))
            _channels[key] = entry
        return entry


# how far past the retry deadline a call may wait for its sidecar (a retry's backoff,
# up to 1 s, may start an attempt about that late anyway)
_OVERSHOOT_S = 1.0


def _connected(channel: Any) -> bool:
    """Whether `channel` is connected now (False when it cannot tell).

    As grpc's own poll of a channel's state asks it (`check_connectivity_state` of the
    core channel, under any interceptor's wrapper): 1.5 us, against about 0.5 ms for
    `grpc.channel_ready_future` of a channel that is ready.
    """
    for _ in range(3):
        check = getattr(channel, "check_connectivity_state", None)
        if check is not None:
            return bool(check(False) == grpc.ChannelConnectivity.READY.value[0])
        channel = getattr(channel, "_channel", None)
    return False


# "off": every call over gRPC, even where the sidecar serves the frame lane
ENV_FRAME_LANE = "TASKSTATE_FRAME_LANE"
# one lane (its sockets: one per thread) per (target, token) in this process
_lanes: dict[tuple[str, str | None], FrameLane] = {}


def lane_for(target: str, security: SidecarSecurity) -> FrameLane | None:
    """The frame lane of the sidecar at gRPC `target` (None: gRPC only).

    Only for a Unix socket without TLS, and unless TASKSTATE_FRAME_LANE=off.
    """
    if not target.startswith("unix:") or security.tls:
        return None
    key = (target, security.token)
    lane = _lanes.get(key)
    if lane is None:
        if os.environ.get(ENV_FRAME_LANE, "on") == "off":
            return None
        path = frames.lane_path(target[len("unix:") :])
        lane = _lanes.setdefault(key, FrameLane(path, security.token))
    return lane


NOT_GRPC = "Failed parsing HTTP/2"  # what gRPC says of a socket that answers something else


def translate(exc: grpc.RpcError, task: str | None, target: str) -> TaskStateError:
    """Turn a gRPC failure into the matching TaskStateError (once, here)."""
    call: Any = exc
    code = call.code() if hasattr(call, "code") else None
    details = call.details() if hasattr(call, "details") else str(exc)
    trailing = dict(call.trailing_metadata() or ()) if hasattr(call, "trailing_metadata") else {}
    ts_code = trailing.get(codes.METADATA_KEY)
    if isinstance(ts_code, bytes):
        ts_code = ts_code.decode()
    return translate_status(code, details, ts_code, task, target)


_STATUS = {s.value[0]: s for s in grpc.StatusCode}

# what an operator does about a sidecar that does not answer (every such error says it)
_CHECK_THE_SIDECAR = (
    "Operator action: check that the sidecar runs beside this executor (`taskstate sidecar "
    "...` or the executor plugin) and that TASKSTATE_SIDECAR points at it."
)


def translate_frame(exc: FrameStatusError, task: str | None, target: str) -> TaskStateError:
    """`translate` for an error the sidecar answered on the frame lane."""
    return translate_status(_STATUS.get(exc.status), exc.details, exc.code, task, target)


def translate_status(
    code: grpc.StatusCode | None,
    details: str | None,
    ts_code: str | None,
    task: str | None,
    target: str,
) -> TaskStateError:
    """The TaskStateError of a status, its details and its taskstate code."""
    if ts_code in ERROR_BY_CODE:
        return ERROR_BY_CODE[ts_code](details or ts_code, task)
    where = f"task {task}: " if task else ""
    target = address(target)
    if NOT_GRPC in (details or ""):
        return ConfigError(
            f"{where}{target} is not a taskstate sidecar (it does not speak gRPC: "
            f"{details}); point at the sidecar's --listen address",
            task,
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return LimitError(
            f"{where}the request was refused as too large ({details}). Commit more often, "
            "or raise TASKSTATE_MAX_MESSAGE_BYTES and the sidecar's --max-message-bytes "
            "together.",
            task,
        )
    if code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    ):
        return SidecarUnavailableError(
            f"{where}the sidecar at {target} did not answer ({code.name}: {details}). "
            + _CHECK_THE_SIDECAR,
            task,
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return TaskStateError(
            f"{where}the sidecar at {target} does not implement this call ({details}). "
            "Operator action: run the sidecar (image or chart) of the client's version.",
            task,
        )
    return TaskStateError(f"{where}sidecar call failed ({code}: {details})", task)


class _RetryableError(Exception):
    """Internal: a transport failure that is safe to retry."""

    def __init__(self, error: TaskStateError) -> None:
        super().__init__(error)
        self.error = error


class GrpcTransport:
    """Calls the sidecar with a deadline per call.

    Retries only when the sidecar was not reachable (every call is idempotent: commits
    carry absolute values and an epoch).
    """

    def __init__(
        self,
        target: str,
        *,
        timeout_s: float,
        retry_deadline_s: float,
        max_message_bytes: int,
        security: SidecarSecurity = _PLAIN,
    ) -> None:
        self.target = target
        self.security = security
        self.timeout_s = timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.max_message_bytes = max_message_bytes

    @property
    def stub(self) -> pb_grpc.TaskStateServiceStub:
        """The process-local stub (created lazily, re-created after a fork)."""
        return _stub(self.target, self.max_message_bytes, self.security)

    def _reached(self, task: str | None, wait_s: float) -> None:
        """Wait at most `wait_s` for the channel to reach the sidecar.

        A call waits for an unreachable sidecar (`wait_for_ready`) as long as its own
        deadline: where that would end more than a second after the retry deadline, the
        wait for the sidecar is bounded by what is left of it, so that
        TASKSTATE_RETRY_DEADLINE bounds how long a task waits for a sidecar that is not
        there (within the second a retry's backoff may overshoot it anyway).
        """
        if self.timeout_s - wait_s <= _OVERSHOOT_S:
            return  # the defaults (30 s and 30 s): the call's own wait ends in time
        channel = _channel(self.target, self.max_message_bytes, self.security)[0]
        if _connected(channel):
            return
        ready = grpc.channel_ready_future(channel)  # about 0.5 ms even when ready
        try:
            ready.result(timeout=max(wait_s, 0.0))
        except grpc.FutureTimeoutError:
            where = f"task {task}: " if task else ""
            raise _RetryableError(
                SidecarUnavailableError(
                    f"{where}the sidecar at {address(self.target)} could not be reached within "
                    f"TASKSTATE_RETRY_DEADLINE ({self.retry_deadline_s:g} s). "
                    + _CHECK_THE_SIDECAR,
                    task,
                )
            ) from None
        finally:
            ready.cancel()

    def _lane(self) -> FrameLane | None:
        """The sidecar's frame lane, for a Unix socket without TLS (None: gRPC only)."""
        return lane_for(self.target, self.security)

    def _unary(self, method: str, req: Any, task: str, parse: Callable[[bytes], T]) -> T:
        """A unary call: on the frame lane when the sidecar serves one, else over gRPC."""

        def grpc_call(wait_s: float) -> T:
            self._reached(task, wait_s)
            fn: Callable[..., T] = getattr(self.stub, method)
            return fn(req, timeout=self.timeout_s, wait_for_ready=True)

        lane = self._lane()
        if lane is None or not lane.open_now():
            return self._call(task, grpc_call)
        data = req.SerializeToString()

        def attempt(wait_s: float) -> T:
            try:
                return parse(lane.call(method, data, self.timeout_s, self.max_message_bytes))
            except LaneUnreachableError:
                # nothing was sent: a sidecar starting, or one without the lane (a stale
                # socket) -- gRPC waits for it as every call always did
                return grpc_call(wait_s)

        return self._call(task, attempt)

    def _call(self, task: str | None, fn: Callable[[float], T]) -> T:
        """`fn(wait_s)`, retried while the sidecar is unreachable, for the retry deadline.

        `wait_s`: how much of the retry deadline is left, the longest `fn` may wait for
        the sidecar to be reachable (`_reached`).
        """
        give_up = time.monotonic() + self.retry_deadline_s

        def attempt() -> T:
            try:
                return fn(give_up - time.monotonic())
            except grpc.RpcError as exc:
                err = translate(exc, task, self.target)
                if type(err) is SidecarUnavailableError:
                    raise _RetryableError(err) from exc
                raise err from None
            except FrameStatusError as exc:
                err = translate_frame(exc, task, self.target)
                if type(err) is SidecarUnavailableError:
                    raise _RetryableError(err) from None
                raise err from None
            except LaneDownError as exc:
                where = f"task {task}: " if task else ""
                raise _RetryableError(
                    SidecarUnavailableError(
                        f"{where}the sidecar at {address(self.target)} did not answer ({exc}). "
                        "Operator action: check that the sidecar runs beside this executor.",
                        task,
                    )
                ) from None

        try:
            for a in Retrying(
                retry=retry_if_exception_type(_RetryableError),
                stop=stop_after_delay(self.retry_deadline_s),
                wait=wait_random_exponential(multiplier=0.05, max=1.0),
                reraise=True,
            ):
                with a:
                    return attempt()
        except _RetryableError as exc:
            raise exc.error from None
        raise AssertionError("unreachable")  # pragma: no cover

    def open(self, req: pb.OpenRequest, task: str) -> pb.OpenResponse:
        """Open (claim) a task."""
        return self._unary("Open", req, task, pb.OpenResponse.FromString)

    def restore(
        self,
        req: pb.RestoreRequest,
        task: str,
        on_chunk: Callable[[pb.RestoreChunk], None],
        on_reset: Callable[[], None],
    ) -> str:
        """Stream the state chunk by chunk into `on_chunk` (nothing is buffered here).

        If the sidecar goes away mid-stream, `on_reset` discards what arrived and the
        stream starts again, within the retry deadline. Returns the restored version.
        """

        def run(wait_s: float) -> str:
            self._reached(task, wait_s)
            on_reset()
            version = ""
            for chunk in self.stub.Restore(req, timeout=self.timeout_s, wait_for_ready=True):
                on_chunk(chunk)
                if chunk.last:
                    version = chunk.version
            return version

        return self._call(task, run)

    def commit(self, req: pb.CommitRequest, task: str) -> pb.CommitResponse:
        """Commit one change set."""
        return self._unary("Commit", req, task, pb.CommitResponse.FromString)

    def open_commit(self, req: pb.OpenCommitRequest, task: str) -> pb.OpenCommitResponse:
        """Open, then commit under the epoch it gave (a block that only wrote)."""
        return self._unary("OpenCommit", req, task, pb.OpenCommitResponse.FromString)

    def attach(self, requests: Iterator[pb.AttachMessage]) -> Iterator[pb.AttachOrder]:
        """The Attach stream (no deadline, no retry: `_buffer.Attachment` handles its end)."""
        try:
            yield from self.stub.Attach(requests, wait_for_ready=True)
        except grpc.RpcError as exc:
            raise translate(exc, None, self.target) from None

    def multi_get(self, req: pb.GetRequest, task: str) -> pb.GetResponse:
        """Read keys (remote mode)."""
        return self._unary("MultiGet", req, task, pb.GetResponse.FromString)

    def describe(self, req: pb.DescribeRequest, task: str) -> pb.TaskInfo:
        """Describe a task."""
        return self._unary("Describe", req, task, pb.TaskInfo.FromString)
