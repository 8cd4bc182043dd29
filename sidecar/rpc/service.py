"""Registration: every RPC of the .proto, served by its audience's class behind the guard.

The task calls (task.py) get the backend's task store wrapped in the metered layer; the
reads (read.py) that and its admin store; the operators' calls (admin.py) its admin
store; the data source's writes (seed.py) its seed store; Attach (flush.py) the flush
coordinator.
Requests that do not parse get INVALID_ARGUMENT with a taskstate code, not gRPC's bare
UNKNOWN.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.unknown_fields import UnknownFieldSet
from grpc import aio

from taskstate.proto import codes
from taskstate.proto import taskstate_pb2 as pb

from ..auth import Authorizer
from ..config import Limits
from ..flush import FlushCoordinator
from ..storage.base import Backend
from ..storage.metered import MeteredTaskStore
from ..sweeper import Sweeper
from .admin import AdminRpcs
from .flush import FlushRpcs
from .guard import CallContext, GrpcCall, Guard, abort, observed
from .read import ReadRpcs
from .seed import SeedRpcs
from .task import TaskRpcs
from .wire import bad

_SERVICE = pb.DESCRIPTOR.services_by_name["TaskStateService"]
SERVICE_NAME = _SERVICE.full_name


def label(name: str, request: Any) -> str:
    """The name a call is counted and logged under: a Read by what it reads.

    A task attempt's reads keep the series they had as calls of their own: "Restore"
    (the whole state, or what changed since a version) and "Get" (some keys).
    """
    if name != "Read" or not getattr(request, "epoch", 0):
        return name
    return "Get" if request.packed_keys else "Restore"


@dataclass(frozen=True, slots=True)
class _Malformed:
    """Bytes that are not the request message (or carry a string that is not UTF-8)."""

    message: str
    error: str


def _lenient(cls: Any) -> Callable[[bytes], Any]:
    def parse(raw: bytes) -> Any:
        try:
            message = cls.FromString(raw)
        except Exception as exc:  # DecodeError, or invalid UTF-8 in a string field
            return _Malformed(cls.DESCRIPTOR.name, str(exc)[:200])
        unknown = UnknownFieldSet(message)  # a form this sidecar does not read: never ignored
        if len(unknown):
            fields = (unknown[i].field_number for i in range(len(unknown)))
            numbers = ", ".join(sorted({str(n) for n in fields}))
            why = f"field(s) {numbers} not in the wire's version 1"
            return _Malformed(cls.DESCRIPTOR.name, why)
        return message

    return parse


async def _refuse_malformed(method: str, bad_request: _Malformed, context: CallContext) -> None:
    with observed(method, None) as outcome:
        outcome.append(codes.INVALID_ARGUMENT)
        await abort(
            context,
            bad(
                f"{method}: the request is not a valid {bad_request.message} "
                f"({bad_request.error}). Use a taskstate client or the stubs generated from "
                "proto/taskstate.proto."
            ),
        )


def _unary(guard: Guard, name: str, impl: Any) -> Callable[..., Awaitable[Any]]:
    async def handle(request: Any, context: CallContext) -> Any:
        if isinstance(request, _Malformed):
            await _refuse_malformed(name, request, context)
        return await guard.unary(context, name, request, impl)

    return handle


def _stream(guard: Guard, name: str, impl: Any) -> Callable[..., AsyncGenerator[Any, None]]:
    async def refuse(request: _Malformed, context: CallContext) -> AsyncGenerator[Any, None]:
        await _refuse_malformed(name, request, context)
        yield  # pragma: no cover - the refusal raises

    def handle(request: Any, context: CallContext) -> AsyncGenerator[Any, None]:
        if isinstance(request, _Malformed):
            return refuse(request, context)
        return guard.stream(context, label(name, request), request, impl)

    return handle


def _bidi(guard: Guard, name: str, impl: Any) -> Callable[..., AsyncIterator[Any]]:
    async def handle(requests: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        async for item in guard.bidi(GrpcCall(context), name, requests, impl):
            yield item

    return handle


@dataclass(frozen=True, slots=True)
class UnaryCall:
    """One unary RPC as served: parse the request, handle it (behind the guard), answer.

    `handle` takes the request and a CallContext: each transport adapts its own call.
    """

    parse: Callable[[bytes], Any]
    handle: Callable[[Any, CallContext], Awaitable[Any]]
    serialize: Callable[[Any], bytes]

    async def over_grpc(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        """`handle`, for grpc.aio's server."""
        return await self.handle(request, GrpcCall(context))


@dataclass(frozen=True, slots=True)
class StreamCall:
    """One server-streaming RPC as served: `handle` yields the answers (behind the guard)."""

    parse: Callable[[bytes], Any]
    handle: Callable[[Any, CallContext], AsyncGenerator[Any, None]]
    serialize: Callable[[Any], bytes]

    async def over_grpc(
        self, request: Any, context: aio.ServicerContext[Any, Any]
    ) -> AsyncGenerator[Any, None]:
        """`handle`, for grpc.aio's server."""
        async for item in self.handle(request, GrpcCall(context)):
            yield item


def add_to_server(
    server: aio.Server,
    backend: Backend,
    *,
    limits: Limits,
    redis_url: str = "",
    auth: Authorizer | None = None,
    flush: FlushCoordinator | None = None,
    sweeper: Sweeper | None = None,
) -> dict[str, UnaryCall | StreamCall]:
    """Serve taskstate.v1.TaskStateService on `server` from `backend`.

    Like the generated helper, except that each RPC runs behind the call guard and that
    bytes that are not the request message get INVALID_ARGUMENT with a taskstate code.
    Returns the unary and server-streaming calls as served, for the frame lane
    (frames.py) to serve too.
    """
    guard = Guard(limits.max_in_flight, auth)
    tasks = MeteredTaskStore(backend.tasks)
    task_rpcs = TaskRpcs(
        tasks,
        limits,
        flush is not None,
        sweeper.note if sweeper else lambda t: None,
        flush.opened if flush else lambda t, b, a: None,
    )
    if flush is not None:
        flush.mark_done = flush.mark_done or tasks.mark_done
        flush.commit = flush.commit or task_rpcs.Commit  # what workers hand over
    audiences = (
        task_rpcs,
        ReadRpcs(tasks, backend.admin, limits),
        AdminRpcs(backend.admin, tasks, backend.seeds, limits, redis_url),
        SeedRpcs(backend.seeds, limits),
        FlushRpcs(flush),
    )
    handlers = {}
    served: dict[str, UnaryCall | StreamCall] = {}
    for m in _SERVICE.methods:
        impl = next((getattr(a, m.name) for a in audiences if hasattr(a, m.name)), None)
        if impl is None:
            raise TypeError(f"no RPC class serves {SERVICE_NAME}/{m.name}")
        out = getattr(pb, m.output_type.name).SerializeToString
        if m.client_streaming:  # Attach: a bidirectional stream of small control messages
            handlers[m.name] = grpc.stream_stream_rpc_method_handler(
                _bidi(guard, m.name, impl),
                request_deserializer=getattr(pb, m.input_type.name).FromString,
                response_serializer=out,
            )
        elif m.server_streaming:
            stream = StreamCall(
                _lenient(getattr(pb, m.input_type.name)), _stream(guard, m.name, impl), out
            )
            served[m.name] = stream
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                stream.over_grpc, request_deserializer=stream.parse, response_serializer=out
            )
        else:
            parse = _lenient(getattr(pb, m.input_type.name))
            call = UnaryCall(parse, _unary(guard, m.name, impl), out)
            served[m.name] = call
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                call.over_grpc,
                request_deserializer=call.parse,
                response_serializer=call.serialize,
            )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    return served
