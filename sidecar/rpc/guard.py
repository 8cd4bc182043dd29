"""The call guard: what every RPC goes through, whatever it does.

Each call is counted, held to the in-flight limit, authorized, logged with its task, and
its failure turned into a status, in one place.

The RPC bodies (task.py, admin.py, flush.py) take a request and return an answer; they
know nothing of gRPC contexts, metrics of requests or tokens. A failure leaves as a gRPC
status whose trailing metadata carries the stable taskstate code
(`taskstate.proto.codes`); no Python traceback crosses the wire.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from types import TracebackType
from typing import Any, NoReturn, Protocol, TypeVar

from grpc import aio

from taskstate.proto import codes, ids

from .. import metrics
from ..auth import Authorizer, Grant
from ..config import limit_error
from ..errors import SidecarError
from ..logs import REQUEST, RequestFields

log = logging.getLogger("taskstate.sidecar")
T = TypeVar("T")
# the outcome counted for a stream whose reader went away before its end (not an error
# code a client ever gets: the metrics' `code` label only)
CANCELLED = "CANCELLED"


class CallContext(Protocol):
    """What the guard needs of one call, whichever transport carried it.

    `GrpcCall` adapts grpc.aio's context; the frame lane has its own (rpc/frames.py).
    """

    def token(self) -> str | None:
        """The caller's bearer token, if it sent one."""
        ...

    async def fail(self, error: SidecarError) -> NoReturn:
        """End the call with `error`: its status, taskstate code and message."""
        ...


class GrpcCall:
    """A grpc.aio call as a CallContext."""

    __slots__ = ("context",)

    def __init__(self, context: aio.ServicerContext[Any, Any]) -> None:
        self.context = context

    def token(self) -> str | None:
        """The `authorization: Bearer <token>` metadata's token (the last one sent)."""
        token = None
        for key, value in self.context.invocation_metadata() or ():
            if key == "authorization":
                text = value.decode() if isinstance(value, bytes) else str(value)
                scheme, _, rest = text.partition(" ")
                if scheme.lower() == "bearer":
                    token = rest.strip()
        return token

    async def fail(self, error: SidecarError) -> NoReturn:
        """Abort with the status; the taskstate code goes in the trailing metadata."""
        await self.context.abort(
            error.status, error.message, trailing_metadata=((codes.METADATA_KEY, error.code),)
        )
        raise AssertionError("abort returned")  # pragma: no cover


# what a token refusal says the caller tried to do
VERBS = {
    "Open": "open",
    "Restore": "restore",  # a task attempt's Read of its state (service.label)
    "Commit": "commit to",
    "OpenCommit": "commit to",
    "Get": "read",  # a task attempt's Read of some keys
    "Describe": "describe",
    "List": "list",
    "Drop": "drop",
    "Adopt": "adopt",
    "Rescale": "rescale",
    "Edit": "edit",
    "Read": "read",
    "Import": "import into",
    "Doctor": "diagnose",
    "Attach": "defer commits to",
    "SeedBegin": "write",
    "SeedStage": "write",
    "SeedCommit": "write",
    "SeedAbort": "write",
    "Settle": "settle writes of",
    "Sweep": "sweep",
}

_GRANT: ContextVar[Grant | None] = ContextVar("taskstate_grant", default=None)


def current_grant() -> Grant | None:
    """The grant of the call being served (None when tokens are off)."""
    return _GRANT.get()


def namespace_of(request: Any) -> str | None:
    """The namespace a request touches: its task's, or its own field (List, Drop, Adopt)."""
    request = getattr(request, "open", request)  # OpenCommit: its Open names the task
    task = getattr(request, "task", None)
    if task is not None:
        return str(task.namespace)
    return getattr(request, "namespace", "") or None


def _request_fields(request: Any) -> dict[str, Any]:
    """task, batch and epoch of a request, for its log records (only what it carries)."""
    out: dict[str, Any] = {}
    request = getattr(request, "open", request)  # OpenCommit: its Open names the task
    t = getattr(request, "task", None)
    if t is not None and t.namespace:
        out["task"] = ids.fq_task_id(t.namespace, t.component, t.partition)
    elif namespace_of(request):
        out["namespace"] = request.namespace
    if request is not None and "batch" in request.DESCRIPTOR.fields_by_name:
        if request.HasField("batch"):
            out["batch"] = request.batch
    if getattr(request, "epoch", 0):
        out["epoch"] = request.epoch
    return out


def _naming_task(exc: SidecarError, request: Any) -> SidecarError:
    """`exc` with "task NS/COMPONENT/PARTITION: " in front, when it does not say which."""
    task = getattr(getattr(request, "open", request), "task", None)
    if task is None or exc.message.startswith("task "):
        return exc
    fq = ids.fq_task_id(task.namespace, task.component, task.partition)
    return SidecarError(exc.code, f"task {fq}: {exc.message}")


@functools.cache
def _answered(method: str, code: str) -> Any:
    """The requests counter's child of `method` and outcome `code`."""
    return metrics.REQUESTS.labels(method, code)


class observed:  # noqa: N801 - used as a function: `with observed(method, request) as outcome`
    """Count the call (in flight, then by outcome) and tag its log records.

    The caller puts the outcome's code in the list `with` gives; nothing there means "ok";
    an exception leaving the block with nothing there counts as INTERNAL. (A class, not a
    generator: every call of the hot path goes through it.)
    """

    __slots__ = ("_method", "_request", "_token", "outcome")

    def __init__(self, method: str, request: Any) -> None:
        self._method, self._request = method, request
        self.outcome: list[str] = []

    def __enter__(self) -> list[str]:
        self._token = REQUEST.set(RequestFields(_request_fields, self._request))
        counts = metrics.IN_FLIGHT.counts
        counts[self._method] = counts.get(self._method, 0) + 1
        return self.outcome

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        outcome = self.outcome
        if exc_type is not None and not outcome:
            outcome.append(codes.INTERNAL)
        metrics.IN_FLIGHT.counts[self._method] -= 1
        _answered(self._method, outcome[0] if outcome else "ok").inc()
        try:
            REQUEST.reset(self._token)
        except ValueError:  # a stream closed from another context: that context ends anyway
            pass


# Refusals that stall a job until someone acts (docs/operations/metrics.md#what-to-alert-on):
# logged as warnings, where a fenced zombie or a bad argument is an answer like any other
NEEDS_AN_OPERATOR = frozenset(
    {codes.STATE_LOST, codes.STATE_AHEAD, codes.CORRUPT_STATE, codes.PARTITIONS, codes.DURABILITY}
)


async def abort(context: CallContext, exc: SidecarError) -> NoReturn:
    """End the call with the error (logged: as a warning when an operator must act)."""
    level = logging.WARNING if exc.code in NEEDS_AN_OPERATOR else logging.INFO
    log.log(level, "request refused", extra={"code": exc.code, "error": exc.message})
    await context.fail(exc)


class Guard:
    """What every call goes through, whatever it does."""

    def __init__(self, max_in_flight: int, auth: Authorizer | None) -> None:
        self.max_in_flight = max_in_flight
        self.auth = auth  # None: no tokens (the socket's permissions are the gate)
        self._in_flight = 0

    def _take_slot(self, what: str) -> None:
        """Take one of --max-in-flight request slots; refuse (LIMIT) when none is free.

        The caller gives it back (`self._in_flight -= 1`) when the call ends.
        """
        if self._in_flight >= self.max_in_flight:
            raise limit_error(
                f"{what}: the sidecar is serving {self._in_flight} requests, its limit "
                f"(--max-in-flight {self.max_in_flight}). Retry shortly; if this is "
                "steady, run more sidecars or raise --max-in-flight."
            )
        self._in_flight += 1

    def _authorize(self, context: CallContext, what: str, request: Any) -> None:
        """With tokens on: the caller's grant, refused unless it covers the namespace."""
        if self.auth is None:
            _GRANT.set(None)
            return
        _GRANT.set(self.auth.check(context.token(), namespace_of(request), VERBS.get(what, what)))

    async def unary(
        self, context: CallContext, what: str, request: Any, fn: Callable[[Any], Awaitable[T]]
    ) -> T:
        """Serve one unary call: counted, within the limits, authorized, errors mapped."""
        with observed(what, request) as outcome:
            try:
                self._take_slot(what)
                try:
                    self._authorize(context, what, request)
                    return await fn(request)
                finally:
                    self._in_flight -= 1
            except Exception as exc:
                await self._refuse(context, what, request, outcome, exc)

    async def stream(
        self, context: CallContext, what: str, request: Any, fn: Callable[[Any], AsyncIterator[T]]
    ) -> AsyncGenerator[T, None]:
        """`unary` for a server-streaming call.

        A stream its reader left before the end is counted as CANCELLED (the reader went
        away: not the sidecar's failure).
        """
        with observed(what, request) as outcome:
            try:
                self._take_slot(what)
                try:
                    self._authorize(context, what, request)
                    async for item in fn(request):
                        yield item
                finally:
                    self._in_flight -= 1
            except (GeneratorExit, asyncio.CancelledError):
                outcome.append(CANCELLED)
                raise
            except Exception as exc:
                await self._refuse(context, what, request, outcome, exc)

    async def bidi(
        self, context: CallContext, what: str, requests: Any, fn: Callable[[Any], AsyncIterator[T]]
    ) -> AsyncIterator[T]:
        """A long-lived bidirectional stream (Attach): not held to --max-in-flight.

        Any valid token may open one; the stream's end by cancellation (the worker went
        away) is a normal end.
        """
        with observed(what, None) as outcome:
            try:
                self._authorize(context, what, None)
                async for item in fn(requests):
                    yield item
            except asyncio.CancelledError:
                outcome.append("ok")
                raise
            except Exception as exc:
                await self._refuse(context, what, None, outcome, exc)

    async def _refuse(
        self, context: CallContext, what: str, request: Any, outcome: list[str], exc: Exception
    ) -> NoReturn:
        """End a failed call: a SidecarError's code, or INTERNAL (the log gets the trace)."""
        if isinstance(exc, SidecarError):
            outcome.append(exc.code)
            if exc.code == codes.FENCED:
                metrics.FENCED.inc()
            await abort(context, _naming_task(exc, request))
        outcome.append(codes.INTERNAL)
        log.error("unexpected failure in %s", what, exc_info=exc)
        await abort(
            context,
            SidecarError(codes.INTERNAL, f"internal error in {what}: {type(exc).__name__}"),
        )
