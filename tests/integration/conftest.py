"""Real redis-server and real sidecar processes on temporary Unix sockets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import _cache
from taskstate.sidecar.storage.redis.keys import data_key, namespace_key, namespace_pattern
from taskstate.testing import RedisServer, SidecarProcess, find_redis_server

from .attempt_worker import Worker, worker_pool

pytestmark = pytest.mark.integration


def _require_redis() -> None:
    try:
        find_redis_server()
    except FileNotFoundError as exc:  # fail loudly with the fix, never skip
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    _require_redis()
    # DEBUG SLEEP lets a test hold Redis busy while a request is in flight
    with RedisServer(
        tmp_path_factory.mktemp("redis"), extra=["--enable-debug-command", "local"]
    ) as r:
        yield r


@pytest.fixture(scope="module")
def sidecar(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    sock = tmp_path_factory.mktemp("sidecar") / "s.sock"
    with SidecarProcess(redis_server.url, sock) as s:
        yield s


@pytest.fixture(scope="module")
def metered_sidecar(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    """A sidecar of the module's own, whose metrics its tests read."""
    sock = tmp_path_factory.mktemp("metered") / "s.sock"
    with SidecarProcess(redis_server.url, sock, extra=["--metrics-port", "0"]) as s:
        yield s


@pytest.fixture
def workers(metered_sidecar: SidecarProcess, namespace: str) -> Iterator[list[Worker]]:
    """Three worker processes (each its own claim cache) on the metered sidecar."""
    with worker_pool(metered_sidecar.target, namespace) as ws:
        yield ws


@pytest.fixture(autouse=True)
def fresh_process_sessions() -> Iterator[None]:
    """Each test starts as a fresh Python worker would: no claims held."""
    _cache.sessions.clear()
    yield
    _cache.sessions.clear()


@pytest.fixture(autouse=True)
def known_namespace(request: pytest.FixtureRequest) -> None:
    """A test's namespace is known to Redis, as a query's is once its batch 0 ran.

    Tests may open at any batch first; a streaming Open past batch 0 in a namespace Redis
    has no record of is refused (STATE_LOST), which test_state_lost.py tests on
    namespaces of its own (or after FLUSHALL).
    """
    if {"redis_server", "namespace"} <= set(request.fixturenames):
        r: RedisServer = request.getfixturevalue("redis_server")
        ns: str = request.getfixturevalue("namespace")
        r.client().hset(namespace_key(ns), "adopted_at", "0")


def snapshot(r: RedisServer, namespace: str) -> dict[bytes, object]:
    """Every key of a namespace (and the index) with its exact content."""
    c = r.client()
    out: dict[bytes, object] = {}
    for key in sorted(c.scan_iter(match=namespace_pattern(namespace))):
        kind = c.type(key)
        if kind == b"hash":
            out[key] = c.hgetall(key)
        elif kind == b"set":
            out[key] = c.smembers(key)
        else:
            out[key] = c.dump(key)
    return out


# what an Open writes of its claim (not of the state): the batch's now for expiry too
CLAIM_FIELDS = {b"epoch", b"opened_at", b"last_writer", b"claim", b"claim_batch", b"superseded",
                b"now_batch", b"now_ms"}  # fmt: skip


def stored(
    r: RedisServer, namespace: str, decode: Callable[[bytes], Any] | None = None
) -> dict[str, Any]:
    """The committed data of task NAMESPACE/c/0: raw values, or each passed to `decode`."""
    data = r.client().hgetall(data_key(namespace, "c", 0))
    return {k.decode(): v if decode is None else decode(v) for k, v in data.items()}


def committed_snapshot(r: RedisServer, namespace: str) -> dict[bytes, object]:
    """`snapshot` without the fields that entering a block (a claim) changes."""
    return strip_claim(snapshot(r, namespace))


def strip_claim(snap: dict[bytes, object]) -> dict[bytes, object]:
    """Drop the meta fields that a claim changes from a snapshot."""
    out = dict(snap)
    for key, value in out.items():
        if key.endswith(b":meta") and isinstance(value, dict):
            out[key] = {f: v for f, v in value.items() if f not in CLAIM_FIELDS}
    return out


@pytest.fixture
def tmp_sock(tmp_path: Path) -> Path:
    return tmp_path / "s.sock"
