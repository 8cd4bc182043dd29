"""Standalone Redis faults: SIGKILL with AOF `always`, a 20 s outage, TLS with an ACL user."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from taskstate.client import (
    DurabilityError,
    LocalContext,
    StorageUnavailableError,
    TaskState,
    _cache,
)
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess
from taskstate.testing.topologies import RedisNode, make_tls_material

from ..waiting import eventually
from ..workload import Outcome, decode_hash, expected, run_batch

pytestmark = pytest.mark.integration


def health(target: str) -> int:
    """The sidecar's overall gRPC health status."""
    with grpc.insecure_channel(target.replace("unix://", "unix:")) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status)


def test_fsynced_commits_survive_sigkill_of_redis(tmp_path: Path, namespace: str) -> None:
    """AOF `appendfsync always` + durability fsynced: every acknowledged commit is on disk."""
    redis = RedisServer(tmp_path / "redis", appendonly=True, fsync_always=True).start()
    side = SidecarProcess(redis.url, tmp_path / "s.sock", extra=["--redis-deadline", "3"]).start()
    try:
        outcome = Outcome()
        kills = 0

        def killer() -> None:
            nonlocal kills
            for _ in range(3):
                time.sleep(0.7)
                redis.kill()  # SIGKILL, between or during commits
                kills += 1
                time.sleep(0.5)
                redis.start()

        t = threading.Thread(target=killer)
        t.start()
        batches = 0
        while t.is_alive() or batches < 40:
            for p in range(3):
                run_batch(side.target, namespace, p, batches, durability="fsynced", outcome=outcome)
            batches += 1
        t.join()
        assert kills == 3
        redis.kill()  # once more, straight after the last acknowledgement
        redis.start()
        c = redis.client()
        for p in range(3):
            assert decode_hash(c.hgetall(data_key(namespace, "c", p))) == expected(batches)
        # the kills really hit requests: the sidecar retried them (or the task did)
        retried = side.log_path.read_text().count("redis call failed, retrying")
        assert retried or outcome.errors, "no request ever met a dead Redis: untested"
        assert all(isinstance(e, StorageUnavailableError) for e in outcome.errors), outcome.errors
    finally:
        side.kill()
        redis.stop()


def test_redis_down_20s_commits_fail_clearly_then_resume(tmp_path: Path, namespace: str) -> None:
    """Down for 20 s: commits fail after the deadline, health is NOT_SERVING, no partial
    commit is ever visible, and commits succeed again once Redis is back."""
    redis = RedisServer(tmp_path / "redis", appendonly=True, fsync_always=True).start()
    side = SidecarProcess(redis.url, tmp_path / "s.sock", extra=["--redis-deadline", "4"]).start()
    partial: list[str] = []
    stop = threading.Event()

    def watcher() -> None:  # a reader that would see a half-applied commit
        while not stop.is_set():
            with contextlib.suppress(Exception):  # Redis is down: nothing to see
                c = redis.client()
                for p in range(2):
                    state = decode_hash(c.hgetall(data_key(namespace, "c", p)))
                    if state and len(state) != state["n"] + 1:
                        partial.append(repr(state))
                c.close()
            time.sleep(0.01)

    w = threading.Thread(target=watcher)
    w.start()
    try:
        batch = 0
        for batch in range(5):
            for p in range(2):
                run_batch(side.target, namespace, p, batch)
        assert health(side.target) == health_pb2.HealthCheckResponse.SERVING
        redis.kill()
        down_at = time.monotonic()
        failures: list[tuple[float, StorageUnavailableError]] = []
        while time.monotonic() - down_at < 12:
            t0 = time.monotonic()
            with pytest.raises(StorageUnavailableError) as info:
                run_batch(side.target, namespace, 0, 5, give_up_s=0)
            failures.append((time.monotonic() - t0, info.value))
        time.sleep(1.5)
        assert health(side.target) == health_pb2.HealthCheckResponse.NOT_SERVING
        msg = str(failures[0][1])
        assert f"{namespace}/c/0" in msg and "did not answer" in msg and "4 s" in msg, msg
        assert all(3.5 < took < 20 for took, _ in failures), [f[0] for f in failures]
        # a commit started in the outage that outlives it: succeeds after recovery
        late = threading.Thread(target=run_batch, args=(side.target, namespace, 1, 5))
        late.start()
        assert time.monotonic() - down_at < 19, "the outage's failures took too long to test"
        time.sleep(20 - (time.monotonic() - down_at))
        redis.start()
        late.join(timeout=60)
        assert not late.is_alive()
        run_batch(side.target, namespace, 0, 5)
        eventually(
            lambda: health(side.target) == health_pb2.HealthCheckResponse.SERVING,
            "health did not come back to SERVING",
            10,
            0.2,
        )
        for p in range(2):
            run_batch(side.target, namespace, p, 6)
    finally:
        stop.set()
        w.join()
        side.kill()
    c = redis.client()
    for p in range(2):
        assert decode_hash(c.hgetall(data_key(namespace, "c", p))) == expected(7)
    assert partial == []
    redis.stop()


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("tls")
    tls = make_tls_material(d / "pki")
    node = RedisNode(d / "redis", tls=tls, password="admin-pw").start()  # noqa: S106
    node.client().execute_command("CONFIG", "SET", "requirepass", "admin-pw")
    # exactly the user docs/how-to/redis.md recommends
    node.client().execute_command(
        "ACL", "SETUSER", "tasks", "on", ">s3cr3t-pw", "~ts:*", "resetchannels", "-@all",
        "+@read", "+@write", "+@scripting", "+@connection", "+info", "+config|get", "+wait",
        "+cluster|slots", "+cluster|shards", "+cluster|nodes",
    )  # fmt: skip
    yield node, tls
    node.kill()


def test_tls_redis_with_acl_user(tls_redis, tmp_path: Path, namespace: str) -> None:  # type: ignore[no-untyped-def]
    node, tls = tls_redis
    (tmp_path / "pw").write_text("s3cr3t-pw\n")
    side = SidecarProcess(
        f"rediss://tasks@127.0.0.1:{node.port}/0",
        tmp_path / "s.sock",
        extra=[
            "--redis-password-file", str(tmp_path / "pw"),
            "--redis-tls-ca", str(tls.ca),
            "--redis-tls-cert", str(tls.client_cert),
            "--redis-tls-key", str(tls.client_key),
        ],
    ).start()  # fmt: skip
    try:
        for b in range(3):
            run_batch(side.target, namespace, 0, b)
        assert health(side.target) == health_pb2.HealthCheckResponse.SERVING
        # a state big enough to be restored page by page (HSCAN + INFO), fsynced refused
        # for a clear reason (no AOF), not for a missing right
        with TaskState(LocalContext(1, batch_id=0), component="c", namespace=namespace,
                       sidecar=side.target) as s:  # fmt: skip
            s.update({f"k{i}": i for i in range(12_000)})
        _cache.sessions.clear()  # a fresh worker: restore from Redis
        with TaskState(LocalContext(1, batch_id=1), component="c", namespace=namespace,
                       sidecar=side.target) as s:  # fmt: skip
            assert len(s) == 12_000 and s.info.restored and s["k11999"] == 11_999
        with pytest.raises(DurabilityError, match="appendonly=no"):
            run_batch(side.target, namespace, 2, 0, durability="fsynced", give_up_s=0)
    finally:
        side.kill()
    assert decode_hash(node.client().hgetall(data_key(namespace, "c", 0))) == expected(3)
    assert "s3cr3t-pw" not in side.log_path.read_text()


def test_wrong_password_is_a_clear_error_at_start_not_a_hang(  # type: ignore[no-untyped-def]
    tls_redis, tmp_path: Path
) -> None:
    node, tls = tls_redis
    side = SidecarProcess(
        f"rediss://tasks:wrong-pw-123@127.0.0.1:{node.port}/0",
        tmp_path / "s.sock",
        extra=["--redis-tls-ca", str(tls.ca)],
    )
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start") as info:
        side.start(timeout=20)
    took = time.monotonic() - t0
    assert took < 15, f"took {took:.1f} s"
    text = str(info.value)
    assert "refused the sidecar" in text and "AuthenticationError" in text, text
    assert "rediss://tasks:***@127.0.0.1" in text, text
    assert "wrong-pw-123" not in text and "wrong-pw-123" not in side.log_path.read_text()


def test_wrong_password_over_a_unix_socket_is_a_clear_error_at_start(tmp_path: Path) -> None:
    # over a Unix socket redis-py raises a wrong password as the cause of a
    # ConnectionError: the sidecar took it for Redis being down, said "ready" and served
    # NOT_SERVING, and every call failed with "check that Redis is up"
    redis = RedisServer(tmp_path / "redis").start()
    side = SidecarProcess(
        redis.url, tmp_path / "s.sock", extra=["--redis-password-file", str(tmp_path / "pw")]
    )
    try:
        redis.client().execute_command("CONFIG", "SET", "requirepass", "right-pw")
        (tmp_path / "pw").write_text("wrong-pw-123\n")
        with pytest.raises(RuntimeError, match="did not start") as info:
            side.start(timeout=20)
        text = str(info.value)  # the sidecar's own words, from its log
        assert "refused the sidecar" in text and "AuthenticationError" in text, text
        assert "wrong-pw-123" not in text and "wrong-pw-123" not in side.log_path.read_text()
    finally:
        side.kill()  # if it started after all (the failure this test is for), it must go
        redis.kill()


def test_untrusted_certificate_is_a_clear_error_at_start(  # type: ignore[no-untyped-def]
    tls_redis, tmp_path: Path
) -> None:
    node, _ = tls_redis
    other = make_tls_material(tmp_path / "other-pki")
    (tmp_path / "pw").write_text("s3cr3t-pw")
    side = SidecarProcess(
        f"rediss://tasks@127.0.0.1:{node.port}/0",
        tmp_path / "s.sock",
        extra=["--redis-password-file", str(tmp_path / "pw"), "--redis-tls-ca", str(other.ca)],
    )
    with pytest.raises(RuntimeError, match="did not start") as info:
        side.start(timeout=20)
    assert "CERTIFICATE_VERIFY_FAILED" in str(info.value), str(info.value)


def test_scripts_are_reloaded_after_the_script_cache_is_flushed(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    """A restarted or failed-over Redis has no scripts: NOSCRIPT reloads them."""
    run_batch(sidecar.target, namespace, 0, 0)
    redis_server.client().script_flush()
    run_batch(sidecar.target, namespace, 0, 1)
    got = decode_hash(redis_server.client().hgetall(data_key(namespace, "c", 0)))
    assert got == expected(2)


def test_unix_socket_url_selects_the_db(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    import redis as redis_py

    side = SidecarProcess(f"{redis_server.url}?db=3", tmp_path / "s.sock").start()
    try:
        run_batch(side.target, namespace, 0, 0)
    finally:
        side.kill()
    db3 = redis_py.Redis(unix_socket_path=str(redis_server.socket), db=3)
    assert decode_hash(db3.hgetall(data_key(namespace, "c", 0))) == expected(1)
    assert redis_server.client().exists(data_key(namespace, "c", 0)) == 0
