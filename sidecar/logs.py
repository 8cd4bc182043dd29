"""JSON log lines on stderr, one object per line, with the task fields a record carries."""

from __future__ import annotations

import logging
import sys
import time
from contextvars import ContextVar
from typing import Any

import orjson

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message"}

# Fields of the request being served (task, batch, epoch): every record logged while
# serving it carries them, retries and Redis errors included. grpc.aio serves each call in
# its own asyncio task, so each call sees its own value.
REQUEST: ContextVar[dict[str, Any] | None] = ContextVar("taskstate_request", default=None)


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
        if context:
            out.update(context)
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
