"""Durability levels on a standalone Redis 7.0 without replicas: never a silent downgrade."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskstate.client import DurabilityError, LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import namespace_key
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration


def _redis_version(r: RedisServer) -> tuple[int, ...]:
    v = r.client().info("server")["redis_version"]
    return tuple(int(x) for x in str(v).split(".")[:2])


def test_replicated_without_replicas_is_a_durability_error(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock", extra=["--durability-timeout-ms", "300"]
    ).start()
    try:
        with (
            pytest.raises(DurabilityError) as info,
            TaskState(
                LocalContext(0, batch_id=1),
                component="c",
                namespace=namespace,
                sidecar=side.target,
                durability="replicated:1",
            ) as s,
        ):
            s["k"] = 1
        msg = str(info.value)
        assert f"{namespace}/c/0" in msg and "replicated:1" in msg and "0 replica" in msg
    finally:
        side.kill()


def test_fsynced_on_redis_without_waitaof_fails_at_open(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    if _redis_version(redis_server) >= (7, 2):
        pytest.fail("this test expects Redis < 7.2 (Debian 12 ships 7.0); update it for WAITAOF")
    st = TaskState(
        LocalContext(0, batch_id=1),
        component="c",
        namespace=namespace,
        sidecar=sidecar.target,
        durability="fsynced",
    )
    with pytest.raises(DurabilityError, match=r"WAITAOF.*appendonly=no.*>= 7.2"):
        st.__enter__()
    # refused before any write (the namespace's record is the fixture's)
    assert redis_server.client().keys(f"*{namespace}*") == [namespace_key(namespace).encode()]
