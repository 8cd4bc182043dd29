"""The two private APIs of dependencies the sidecar keeps, each for a measured reason.

docs/architecture.md ("Private APIs kept") names them and the figures. When a release of
redis-py or CPython moves one, these fail first and say what to change.
"""

from __future__ import annotations

import asyncio
import threading

import redis.exceptions as rex


def test_redis_py_still_maps_error_replies_to_its_exceptions() -> None:
    """storage/redis/direct.py hands hiredis redis-py's own error mapping."""
    try:
        from redis._parsers.base import BaseParser
    except ImportError as exc:  # pragma: no cover - what this test is for
        raise AssertionError(
            f"redis._parsers.base.BaseParser moved ({exc}): give storage/redis/direct.py's "
            "hiredis.Reader another replyError that maps NOSCRIPT, READONLY, LOADING, NOPERM, "
            "MOVED, ASK, TRYAGAIN and CLUSTERDOWN to redis-py's exceptions"
        ) from None
    for reply, kind in (
        ("NOSCRIPT No matching script", rex.NoScriptError),
        ("READONLY You can't write against a read only replica.", rex.ReadOnlyError),
        ("LOADING Redis is loading the dataset in memory", rex.BusyLoadingError),
        ("MOVED 3999 127.0.0.1:6381", rex.MovedError),
        ("TSFENCED 7", rex.ResponseError),
    ):
        assert type(BaseParser.parse_error(reply)) is kind, reply  # type: ignore[no-untyped-call]


def test_a_running_asyncio_loop_still_names_its_thread() -> None:
    """sidecar/deadline.py finds a loop by `_thread_id`, without asyncio's getpid per call."""

    async def main() -> object:
        return getattr(asyncio.get_running_loop(), "_thread_id", "missing")

    assert asyncio.run(main()) == threading.get_ident(), (
        "asyncio's loops no longer set _thread_id while they run: sidecar/deadline.py then "
        "asks asyncio for the running loop on every deadline (correct, one getpid slower)"
    )
