"""Metrics and logs of a real sidecar: the named series move, records carry the task."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskstate.client import FencedError, LocalContext, PartitionCountError, TaskState, _cache
from taskstate.testing import RedisServer, SidecarProcess
from taskstate.testing.processes import scrape_metrics as scrape

from ..waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def observed(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[SidecarProcess, str]]:
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock", extra=["--metrics-port", "0", "--log-level", "debug"]
    ).start()
    try:
        yield side, side.metrics_url
    finally:
        side.kill()


def ts(side: SidecarProcess, ns: str, batch: int) -> TaskState:
    return TaskState(
        LocalContext(0, batch_id=batch), component="c", namespace=ns, sidecar=side.target
    )


def test_metrics_move_with_commits_restores_rollbacks_and_fencing(
    observed: tuple[SidecarProcess, str], namespace: str
) -> None:
    side, url = observed
    before = scrape(url)
    assert before["taskstate_redis_up"] == 1.0
    for batch in range(3):
        with ts(side, namespace, batch) as s:
            for i in range(100):
                s[f"k{i}"] = batch
    _cache.sessions.clear()  # a new worker replays batch 2: rollback, then reads on demand
    with ts(side, namespace, 2) as s:
        assert s.info.rolled_back and s.info.on_demand and s["k0"] == 1 and "nope" not in s
        s["k0"] = 2
    a = ts(side, namespace, 3)  # a zombie attempt
    a.__enter__()
    a["z"] = 1
    zombie = _cache.sessions.pop(a.task_id)
    with ts(side, namespace, 3) as b:
        b["k1"] = 3
    _cache.sessions[a.task_id] = zombie
    with pytest.raises(FencedError):
        a.__exit__(None, None, None)
    _cache.sessions.clear()
    with ts(side, namespace, 4) as s:  # iteration needs the whole state: a full restore
        assert len(s) == 100 and s.info.restored and s["k1"] == 3

    after = scrape(url)

    def moved(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert moved("taskstate_commits_total") == 6
    assert moved("taskstate_commit_keys_total") == 3 * 100 + 1 + 1
    assert moved("taskstate_commit_bytes_total") > 300 * len("k00")
    assert moved("taskstate_commit_seconds_count") == 6
    assert moved("taskstate_commit_seconds_sum") > 0
    assert moved("taskstate_replay_rollbacks_total") == 1
    assert moved("taskstate_replay_rollback_keys_total") == 100
    # the replaying worker and attempt B hold no cached state: they read on demand (one
    # key found, one absent; B only writes), nothing is restored
    assert moved('taskstate_get_keys_total{outcome="found"}') == 1
    assert moved('taskstate_get_keys_total{outcome="absent"}') == 1
    assert moved("taskstate_restore_keys_total") == 100  # batch 4's len()
    assert moved("taskstate_restore_seconds_count") == 1
    assert moved("taskstate_fenced_commits_total") == 1
    assert moved('taskstate_requests_total{code="FENCED",method="Commit"}') == 1
    assert moved('taskstate_requests_total{code="ok",method="Commit"}') == 6
    assert moved('taskstate_requests_total{code="ok",method="Open"}') == 7
    assert moved('taskstate_requests_total{code="ok",method="Get"}') == 2
    assert moved('taskstate_requests_total{code="ok",method="Restore"}') == 1
    assert after['taskstate_requests_in_flight{method="Commit"}'] == 0
    # a new task's first Open (TSNEW) and the fenced commit (TSFENCED) are the scripts'
    # answers: a Redis-errors alert must not fire on them
    errors = {k: moved(k) for k in after if k.startswith("taskstate_redis_errors_total")}
    assert not any(errors.values()), errors


def test_metrics_count_redis_retries_and_health(tmp_path: Path, namespace: str) -> None:
    """A lost Redis reply is retried and counted; a stopped Redis turns redis_up to 0."""
    from ..proxy import LossyProxy

    redis = RedisServer(tmp_path / "redis").start()
    proxy = LossyProxy(str(redis.socket))
    side = SidecarProcess(proxy.url, tmp_path / "s.sock", extra=["--metrics-port", "0"]).start()
    try:
        url = side.metrics_url
        with ts(side, namespace, 0) as s:
            s["a"] = 1
        with ts(side, namespace, 1) as s:
            proxy.arm()  # the commit's EVALSHA reply is lost: the sidecar retries it
            s["a"] = 2
        assert proxy.replies_lost == 1
        got = scrape(url)
        assert got['taskstate_redis_retries_total{op="commit"}'] >= 1
        assert sum(v for k, v in got.items() if k.startswith("taskstate_redis_errors_total")) >= 1
        assert got["taskstate_redis_up"] == 1.0
        redis.kill()  # the health ping fails within a second or two
        eventually(
            lambda: scrape(url)["taskstate_redis_up"] == 0.0,
            "taskstate_redis_up stayed 1 with Redis gone",
            15,
            0.2,
        )
        redis.start()
        eventually(
            lambda: scrape(url)["taskstate_redis_up"] == 1.0,
            "taskstate_redis_up stayed 0 after restart",
            30,
            0.2,
        )
    finally:
        side.kill()
        proxy.close()
        redis.stop()


def test_log_records_of_a_request_carry_task_batch_and_epoch(
    observed: tuple[SidecarProcess, str], namespace: str
) -> None:
    side, _ = observed
    with ts(side, namespace, 4) as s:
        s["a"] = 1
    _cache.sessions.clear()
    with ts(side, namespace, 4) as s:  # a replay: logged at info with its task fields
        s["a"] = 2
    side.kill()
    records = [json.loads(x) for x in side.log_path.read_text().splitlines() if x.startswith("{")]
    mine = [r for r in records if r.get("task") == f"{namespace}/c/0"]
    rollback = [r for r in mine if "rolled back" in r["msg"]]
    assert rollback, mine
    assert rollback[0]["batch"] == 4 and rollback[0]["epoch"] == 2
    assert all(r["level"] in {"debug", "info", "warning", "error"} for r in records)


def test_a_refusal_that_needs_an_operator_is_a_warning_a_fenced_zombie_is_not(
    observed: tuple[SidecarProcess, str], namespace: str
) -> None:
    side, _ = observed
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=side.target, partitions=4) as s:  # fmt: skip
        s["a"] = 1
    zombie = ts(side, namespace, 1)
    zombie.__enter__()
    zombie["a"] = 2
    held = _cache.sessions.pop(zombie.task_id)
    with ts(side, namespace, 1) as s:  # a newer attempt fences the first
        s["a"] = 3
    _cache.sessions[zombie.task_id] = held
    with pytest.raises(FencedError):
        zombie.__exit__(None, None, None)
    with pytest.raises(PartitionCountError):  # restarted with another count: stalls the job
        TaskState(LocalContext(0, batch_id=2), component="c", namespace=namespace,
                  sidecar=side.target, partitions=8).__enter__()  # fmt: skip
    side.kill()
    records = [json.loads(x) for x in side.log_path.read_text().splitlines() if x.startswith("{")]
    refused = {r["code"]: r["level"] for r in records if r["msg"] == "request refused"}
    assert refused == {"FENCED": "info", "PARTITIONS": "warning"}, refused


def test_claims_reused_across_processes_are_counted_and_are_not_rollbacks(
    observed: tuple[SidecarProcess, str], namespace: str
) -> None:
    from ..attempt_worker import Worker

    side, url = observed
    w1, w2 = Worker(side.target, namespace), Worker(side.target, namespace)
    try:
        before = scrape(url)
        for batch in range(3):  # each attempt's timed-out groups run in a second worker
            attempt = LocalContext(0, batch_id=batch)
            w1.block(attempt, {f"data-{batch}": batch})
            w2.block(attempt, {f"timed-out-{batch}": batch})
        middle = scrape(url)
        w2.block(LocalContext(0, batch_id=2), {})  # a real replay of batch 2
        after = scrape(url)
    finally:
        w1.close()
        w2.close()

    def moved(a: dict[str, float], b: dict[str, float], name: str) -> float:
        return b.get(name, 0.0) - a.get(name, 0.0)

    assert moved(before, middle, "taskstate_claims_reused_total") == 3
    assert moved(before, middle, "taskstate_replay_rollbacks_total") == 0
    assert moved(middle, after, "taskstate_claims_reused_total") == 0
    assert moved(middle, after, "taskstate_replay_rollbacks_total") == 1
    assert moved(middle, after, "taskstate_replay_rollback_keys_total") == 2
