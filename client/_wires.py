"""The two wires to a sidecar behind one interface: gRPC, and the frame lane.

The frame lane (taskstate.proto.frames, client side in `_frames`) is used where the sidecar
may serve one: a Unix socket without TLS, unless TASKSTATE_FRAME_LANE=off. The wire is
chosen once per process and target (`wire_for`); a method the lane does not serve goes
over gRPC, and so does a call the lane could not even connect for (nothing was sent: a
sidecar starting, or one run without the lane). Both end a failed call with `CallFailed`;
`_transport.Transport` does the rest, once for both.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from taskstate.proto import codes, frames
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto import taskstate_pb2_grpc as pb_grpc

from ._frames import FrameLane, FrameStatusError, LaneDownError, LaneUnreachableError
from ._security import SidecarSecurity
from ._settings import FRAME_LANE

_PLAIN = SidecarSecurity()
_STATUS = {s.value[0]: s for s in grpc.StatusCode}


class CallFailed(Exception):  # noqa: N818 - a call's end, not an error of the caller's
    """A call ended without its answer: its gRPC status, taskstate code and details."""

    def __init__(self, status: grpc.StatusCode | None, code: str | None, details: str) -> None:
        super().__init__(details)
        self.status, self.code, self.details = status, code, details


class GrpcWire:
    """gRPC: one channel per (process, target), remade after a fork.

    PySpark forks workers, and a channel made before a fork must not be used after it
    (like redis-py's ConnectionPool._checkpid).
    """

    def __init__(self, target: str, max_message_bytes: int, security: SidecarSecurity) -> None:
        self.target = target
        self.security = security
        self.channel = security.channel(
            target,
            [
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.enable_retries", 0),
                # a restarted sidecar (the plugin replaces a killed one in about a second)
                # is reached within a second, not after gRPC's backoff of up to 120 s
                ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ],
        )
        self.stub = pb_grpc.TaskStateServiceStub(self.channel)

    def unary(self, method: str, request: Any, timeout_s: float, wait: bool) -> Any:
        """One call (`wait`: for a sidecar not reachable yet, as long as its deadline)."""
        try:
            return getattr(self.stub, method)(request, timeout=timeout_s, wait_for_ready=wait)
        except grpc.RpcError as exc:
            raise failed_call(exc) from None

    def stream(
        self, method: str, request: Any, timeout_s: float, whole: bool, wait: bool
    ) -> Iterator[Any]:
        """A server stream's messages (`whole`: `timeout_s` bounds the whole, else none)."""
        timeout = timeout_s if whole else None
        try:
            yield from getattr(self.stub, method)(request, timeout=timeout, wait_for_ready=wait)
        except grpc.RpcError as exc:
            raise failed_call(exc) from None

    def connected(self) -> bool:
        """Whether the channel is connected now (False when it cannot tell).

        As grpc's own poll of a channel's state asks it (`check_connectivity_state` of the
        core channel, under any interceptor's wrapper): 1.5 us, against about 0.5 ms for
        `grpc.channel_ready_future` of a channel that is ready.
        """
        channel: Any = self.channel
        for _ in range(3):
            check = getattr(channel, "check_connectivity_state", None)
            if check is not None:
                return bool(check(False) == grpc.ChannelConnectivity.READY.value[0])
            channel = getattr(channel, "_channel", None)
        return False

    def reached(self, wait_s: float) -> bool:
        """Whether the channel reaches the sidecar within `wait_s`."""
        if self.connected():
            return True
        ready = grpc.channel_ready_future(self.channel)  # about 0.5 ms even when ready
        try:
            ready.result(timeout=max(wait_s, 0.0))
        except grpc.FutureTimeoutError:
            return False
        finally:
            ready.cancel()
        return True


def failed_call(exc: grpc.RpcError) -> CallFailed:
    call: Any = exc
    status = call.code() if hasattr(call, "code") else None
    details = call.details() if hasattr(call, "details") else str(exc)
    trailing = dict(call.trailing_metadata() or ()) if hasattr(call, "trailing_metadata") else {}
    code = trailing.get(codes.METADATA_KEY)
    return CallFailed(status, code.decode() if isinstance(code, bytes) else code, details or "")


class LaneWire:
    """The frame lane, for the methods it serves; gRPC for the rest, and while unreachable."""

    def __init__(self, lane: FrameLane, grpc_wire: GrpcWire, max_message_bytes: int) -> None:
        self.lane = lane
        self.grpc_wire = grpc_wire
        self.max_message_bytes = max_message_bytes

    def unary(self, method: str, request: Any, timeout_s: float, wait: bool) -> Any:
        """One call on the lane, else over gRPC."""
        if method in frames.METHODS and self.lane.open_now():
            try:
                body = self.lane.call(
                    method, request.SerializeToString(), timeout_s, self.max_message_bytes
                )
            except LaneUnreachableError:
                pass  # nothing was sent: gRPC waits for the sidecar as every call always did
            except FrameStatusError as exc:
                raise CallFailed(_STATUS.get(exc.status), exc.code, exc.details) from None
            except LaneDownError as exc:
                raise CallFailed(grpc.StatusCode.UNAVAILABLE, None, str(exc)) from None
            else:
                return _ANSWER[method](body)
        return self.grpc_wire.unary(method, request, timeout_s, wait)

    def close(self) -> None:
        """Close this thread's lane connection and the gRPC channel."""
        self.lane.close()
        self.grpc_wire.channel.close()

    def stream(
        self, method: str, request: Any, timeout_s: float, whole: bool, wait: bool
    ) -> Iterator[Any]:
        """A stream on the lane, else over gRPC (see FrameLane.stream for `whole`)."""
        if method in frames.STREAMS and self.lane.open_now():
            got = False
            try:
                for message in self.lane.stream(
                    method, request.SerializeToString(), timeout_s, self.max_message_bytes,
                    _ANSWER[method], _is_last, whole,
                ):  # fmt: skip
                    got = True
                    yield message
                return
            except LaneUnreachableError:
                pass  # nothing was sent (no lane there): over gRPC
            except LaneDownError as exc:
                if got or whole:  # a whole read is retried as a unary call is
                    details = f"the stream broke off: {exc}"
                    raise CallFailed(grpc.StatusCode.UNAVAILABLE, None, details) from None
                # a connection the sidecar had closed (a restart): over gRPC, from the start
            except FrameStatusError as exc:
                raise CallFailed(_STATUS.get(exc.status), exc.code, exc.details) from None
        yield from self.grpc_wire.stream(method, request, timeout_s, whole, wait)


# each call's answer parsed from its bytes (the lane's; gRPC's stub parses its own)
_ANSWER: dict[str, Callable[[Any], Any]] = {
    m.name: getattr(pb, m.output_type.name).FromString
    for m in pb.DESCRIPTOR.services_by_name["TaskStateService"].methods
}


def _is_last(chunk: Any) -> bool:
    return bool(chunk.last)


def new_wire(target: str, max_message_bytes: int, security: SidecarSecurity) -> GrpcWire | LaneWire:
    """The wire to the sidecar at gRPC `target`: the lane where it may serve one."""
    wire = GrpcWire(target, max_message_bytes, security)
    lane = target.startswith("unix:") and not security.tls
    if lane and os.environ.get(FRAME_LANE.env, FRAME_LANE.default) != "off":
        path = frames.lane_path(target[len("unix:") :])
        return LaneWire(FrameLane(path, security.token), wire, max_message_bytes)
    return wire


_lock = threading.Lock()
_pid = os.getpid()
_wires: dict[tuple[str, int, SidecarSecurity], GrpcWire | LaneWire] = {}


def wire_for(
    target: str, max_message_bytes: int, security: SidecarSecurity = _PLAIN
) -> GrpcWire | LaneWire:
    """This process's wire to the sidecar at gRPC `target`, chosen on first use."""
    global _pid
    with _lock:
        if os.getpid() != _pid:
            _wires.clear()  # the parent's channels: drop, never close, in the child
            _pid = os.getpid()
        key = (target, max_message_bytes, security)
        wire = _wires.get(key)
        if wire is None:
            wire = _wires[key] = new_wire(target, max_message_bytes, security)
        return wire
