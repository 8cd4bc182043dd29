"""JSON log lines on stderr, one object per line, with the task fields a record carries."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import orjson

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message"}


class RequestFields:
    """The fields of the request being served (task, batch, epoch), for its log records.

    Worked out from the request when a record is first logged (most calls log nothing
    at info level, and the hot path should not pay for a dict it never shows).
    """

    __slots__ = ("_describe", "_fields", "_more", "_request")

    def __init__(self, describe: Callable[[Any], dict[str, Any]], request: Any) -> None:
        self._describe, self._request = describe, request
        self._fields: dict[str, Any] | None = None
        self._more: dict[str, Any] = {}

    def add(self, **more: Any) -> None:
        """Fields learnt while serving (an Open's epoch)."""
        self._more.update(more)

    def fields(self) -> dict[str, Any]:
        """Every field, the request's first."""
        if self._fields is None:
            self._fields = self._describe(self._request)
        return {**self._fields, **self._more}


# The request being served: every record logged while serving it carries its fields,
# retries and Redis errors included. grpc.aio serves each call in its own asyncio task
# (the frame lane too), so each call sees its own value.
REQUEST: ContextVar[RequestFields | None] = ContextVar("taskstate_request", default=None)


class JsonFormatter(logging.Formatter):
    """Format records as JSON objects; `extra=` fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        """Render one record."""
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        context = REQUEST.get()
        if context is not None:
            out.update(context.fields())
        for k, v in record.__dict__.items():
            if k not in _STANDARD and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def setup(level: str = "info") -> None:
    """Send the sidecar's logs to stderr as JSON."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("taskstate")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
