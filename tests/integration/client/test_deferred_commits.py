"""Deferred group commits against a real redis-server and a sidecar with a flush barrier.

The test plays the executor plugin: it writes `FLUSH N` / `DISCARD N` on the barrier
socket as the plugin does in onTaskSucceeded / onTaskFailed. Group blocks run in this
process and in spawned worker processes (attempt_worker.py), as Spark's pooled Python
workers run them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import LocalContext, TaskState
from taskstate.client._buffer import buffer
from taskstate.client._errors import StateLostError, StorageUnavailableError
from taskstate.client._transport import Transport
from taskstate.client.admin import AdminClient
from taskstate.proto import codes
from taskstate.sidecar.errors import SidecarError
from taskstate.sidecar.storage.redis.backend import RedisBackend
from taskstate.sidecar.storage.redis.keys import stash_key, task_key
from taskstate.sidecar.storage.values import TaskKey
from taskstate.testing import RedisServer, SidecarProcess

from ..attempt_worker import worker_pool
from ..conftest import snapshot, stored
from ..seeding import begin, commit, stage
from ..waiting import eventually, redis_blocked


def plugin_ctx(partition: int, **kw: Any) -> LocalContext:
    """An attempt whose FLUSH this module sends, playing the executor plugin's part."""
    return LocalContext(partition, plugin_flush=True, **kw)


@pytest.fixture(scope="module")
def barrier_sidecar(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SidecarProcess, Path]]:
    """A sidecar started as the plugin starts it: with a barrier socket beside its own."""
    d = tmp_path_factory.mktemp("barrier")
    barrier = d / "b.sock"
    with SidecarProcess(
        redis_server.url,
        d / "s.sock",
        extra=["--barrier", str(barrier), "--flush-timeout", "20", "--redis-deadline", "1",
               "--metrics-port", "0"],
    ) as s:  # fmt: skip
        yield s, barrier


def ask(barrier: Path, line: str) -> str:
    """One request on the barrier socket, as the plugin sends it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(str(barrier))
        s.sendall(line.encode() + b"\n")
        out = b""
        while not out.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
    return out.decode().strip()


def ask_while_redis_sleeps(redis_server: RedisServer, barrier: Path, line: str, s: int) -> str:
    """`ask(barrier, line)` while Redis sleeps `s` seconds (DEBUG SLEEP from the start).

    Sent once: redis-py retries a call that timed out, which would send DEBUG SLEEP again.
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client: Any = redis.Redis(
        unix_socket_path=str(redis_server.socket),
        socket_timeout=s + 30,
        retry=Retry(NoBackoff(), 0),
    )
    sleeper = threading.Thread(target=lambda: client.execute_command("DEBUG", "SLEEP", s))
    sleeper.start()
    redis_blocked(redis_server.socket)
    try:
        return ask(barrier, line)
    finally:
        sleeper.join()


def groups(ctx: LocalContext, target: str, namespace: str, n: int, start: int = 0) -> None:
    """n one-key group blocks in this process: key gI gets 1 added."""
    for i in range(start, start + n):
        with TaskState(ctx, component="c", namespace=namespace, sidecar=target) as s:
            s[f"g{i}"] = (s.get(f"g{i}") or 0) + 1


def test_a_local_context_beside_the_plugins_sidecar_commits_every_block(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    """A script or notebook on the driver of a local-mode application that loaded the
    plugin meets the plugin's sidecar: no Spark task of its LocalContext ever ends, so
    nothing would send its FLUSH. Its blocks used to be held all the same after the first,
    and were lost with the process; each now commits at its exit."""
    side, barrier = barrier_sidecar
    ctx = LocalContext(0, batch_id=1)
    groups(ctx, side.target, namespace, 5)
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(5)}
    assert not buffer.holds(ctx.taskAttemptId())
    assert side.metrics().get("taskstate_deferred_attempts", 0) == 0


def test_group_blocks_are_committed_once_at_the_flush(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    side, barrier = barrier_sidecar
    before = side.metrics()
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, side.target, namespace, 500)
    # the first block committed at its exit; the 499 others are held in this process
    assert stored(redis_server, namespace, int) == {"g0": 1}
    assert buffer.holds(ctx.taskAttemptId())
    assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == "OK 499"
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(500)}
    assert not buffer.holds(ctx.taskAttemptId())
    # the next batch's attempt reads what was flushed, and defers again
    ctx2 = plugin_ctx(0, batch_id=2)
    groups(ctx2, side.target, namespace, 500)
    assert ask(barrier, f"FLUSH {ctx2.taskAttemptId()}") == "OK 499"
    assert stored(redis_server, namespace, int) == {f"g{i}": 2 for i in range(500)}
    after = side.metrics()
    assert (
        after['taskstate_flushes_total{outcome="ok"}']
        - before.get('taskstate_flushes_total{outcome="ok"}', 0)
        == 2
    )
    assert after["taskstate_deferred_attempts"] == 0


def test_a_flush_of_an_attempt_that_deferred_nothing_answers_at_once(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    side, barrier = barrier_sidecar
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, side.target, namespace, 1)  # one block: committed at its exit, as mapInPandas
    assert not buffer.holds(ctx.taskAttemptId())
    assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == "OK 0"
    assert stored(redis_server, namespace, int) == {"g0": 1}
    assert ask(barrier, "FLUSH 12345") == "OK 0"
    assert ask(barrier, "HELLO").startswith("ERR expected FLUSH")


def test_two_workers_of_one_attempt_are_flushed_together(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    side, barrier = barrier_sidecar
    ctx = plugin_ctx(0, batch_id=1)
    with worker_pool(side.target, namespace, 2) as (w1, w2):
        assert w1.call("groups", ctx, {f"g{i}": 1 for i in range(0, 300)})
        assert w2.call("groups", ctx, {f"g{i}": 1 for i in range(300, 600)})
        # each worker committed its first group; both hold the rest
        assert stored(redis_server, namespace, int) == {"g0": 1, "g300": 1}
        assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == "OK 598"
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(600)}


def test_a_worker_killed_before_the_flush_fails_it_and_the_retry_counts_once(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    side, barrier = barrier_sidecar
    first = plugin_ctx(0, batch_id=1)
    groups(first, side.target, namespace, 100)
    assert ask(barrier, f"FLUSH {first.taskAttemptId()}") == "OK 99"
    ctx = plugin_ctx(0, batch_id=2)
    with worker_pool(side.target, namespace, 2) as (w1, w2):
        assert w1.call("groups", ctx, {f"g{i}": 1 for i in range(100)})
        attached = side.metrics()['taskstate_requests_in_flight{method="Attach"}']
        assert w1.process.pid is not None
        os.kill(w1.process.pid, signal.SIGKILL)  # after its last group, before the task ends
        w1.process.join(10)
        # the flush comes once the sidecar saw the worker's stream end (as when the plugin
        # asks after the task's end); one that races it fails too, saying "the worker
        # ended during the flush"
        eventually(
            lambda: side.metrics()['taskstate_requests_in_flight{method="Attach"}'] != attached,
            "the sidecar never saw the worker go",
            10,
            0.02,
        )
        answer = ask(barrier, f"FLUSH {ctx.taskAttemptId()}")
        assert answer.startswith("FAIL ") and "ended before they were flushed" in answer
        # nothing of the killed worker's held groups reached Redis, only its first block
        assert stored(redis_server, namespace, int) == {
            "g0": 2,
            **{f"g{i}": 1 for i in range(1, 100)},
        }
        # the plugin stopped the executor; Spark runs the task again: the retry rolls
        # batch 2 back and counts every group once
        retry = plugin_ctx(0, batch_id=2, attempt=1)
        assert w2.call("groups", retry, {f"g{i}": 1 for i in range(100)})
        assert ask(barrier, f"FLUSH {retry.taskAttemptId()}") == "OK 99"
    assert stored(redis_server, namespace, int) == {f"g{i}": 2 for i in range(100)}
    # a worker's end (killed or exited) ends its Attach stream normally, not as an error
    assert not side.metrics().get('taskstate_requests_total{code="INTERNAL",method="Attach"}')


def test_a_discarded_attempt_leaves_nothing_and_no_copy_behind(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    side, barrier = barrier_sidecar
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, side.target, namespace, 50)
    assert ask(barrier, f"DISCARD {ctx.taskAttemptId()}") == "OK 0"
    eventually(  # the order reaches this process's Attach thread
        lambda: not buffer.holds(ctx.taskAttemptId()),
        "the discard never reached this process's held groups",
        10,
        0.01,
    )
    assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == "OK 0"
    assert stored(redis_server, namespace, int) == {"g0": 1}
    # the retry in this same process must not take the discarded groups for committed
    retry = plugin_ctx(0, batch_id=1, attempt=1)
    with TaskState(retry, component="c", namespace=namespace, sidecar=side.target) as s:
        assert dict(s) == {}  # batch 1 rolled back: g0's commit too
    groups(retry, side.target, namespace, 50)
    assert ask(barrier, f"FLUSH {retry.taskAttemptId()}") == "OK 50"
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(50)}


def test_a_zombie_attempts_flush_is_fenced(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    side, barrier = barrier_sidecar
    zombie = plugin_ctx(0, batch_id=1)
    with worker_pool(side.target, namespace, 2) as (w1, w2):
        assert w1.call("groups", zombie, {f"g{i}": 1 for i in range(20)})
        newer = plugin_ctx(0, batch_id=1, attempt=1)
        assert w2.call("groups", newer, {f"g{i}": 5 for i in range(20)})
        answer = ask(barrier, f"FLUSH {zombie.taskAttemptId()}")
        assert answer.startswith("FAIL ") and "FENCED" in answer
        assert ask(barrier, f"FLUSH {newer.taskAttemptId()}") == "OK 19"
    assert stored(redis_server, namespace, int) == {f"g{i}": 5 for i in range(20)}


def test_redis_unavailable_during_the_flush_is_waited_out(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    """An outage shorter than the flush timeout costs the task's end its length, no more."""
    side, barrier = barrier_sidecar
    before = side.metrics()
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, side.target, namespace, 30)
    # Redis busy for 4 s: longer than the sidecar's --redis-deadline (1 s), shorter than
    # the flush timeout (20 s)
    answer = ask_while_redis_sleeps(redis_server, barrier, f"FLUSH {ctx.taskAttemptId()}", 4)
    assert answer == "OK 29"
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(30)}
    after = side.metrics()
    waited = sum(v for k, v in after.items() if k.startswith("taskstate_redis_wait_seconds"))
    waited -= sum(v for k, v in before.items() if k.startswith("taskstate_redis_wait_seconds"))
    assert waited > 1.0, after  # seen in the metrics: time spent waiting for Redis


def test_redis_unavailable_past_the_flush_timeout_fails_it_naming_the_outage(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    barrier = tmp_path / "b.sock"
    with SidecarProcess(
        redis_server.url,
        tmp_path / "s.sock",
        extra=["--barrier", str(barrier), "--flush-timeout", "4", "--redis-deadline", "1"],
    ) as side:
        ctx = plugin_ctx(0, batch_id=1)
        groups(ctx, side.target, namespace, 30)
        answer = ask_while_redis_sleeps(redis_server, barrier, f"FLUSH {ctx.taskAttemptId()}", 7)
        assert answer.startswith("FAIL ") and "STORAGE_UNAVAILABLE" in answer, answer
        assert "Redis did not take the held group changes of task" in answer, answer
        assert "spark.taskstate.flushTimeoutSeconds" in answer, answer
        # a write that timed out may still have been applied when Redis woke: all or nothing
        assert stored(redis_server, namespace, int) in (
            {"g0": 1},
            {f"g{i}": 1 for i in range(30)},
        )
        # the executor stops; the retry elsewhere counts every group once
        retry = plugin_ctx(0, batch_id=1, attempt=1)
        with worker_pool(side.target, namespace, 1) as (w,):
            assert w.call("groups", retry, {f"g{i}": 1 for i in range(30)})
            assert ask(barrier, f"FLUSH {retry.taskAttemptId()}") == "OK 29"
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(30)}


def test_without_a_barrier_every_group_block_commits_at_its_exit(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, sidecar.target, namespace, 40)
    assert not buffer.holds(ctx.taskAttemptId())
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(40)}


def test_a_failed_block_commits_what_its_attempt_held_first(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    side, barrier = barrier_sidecar
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, side.target, namespace, 10)
    with pytest.raises(ValueError, match="boom"):
        with TaskState(ctx, component="c", namespace=namespace, sidecar=side.target) as s:
            s["g10"] = 1
            raise ValueError("boom")
    # the failed block's change is gone; the nine held groups were committed before the
    # copy they were merged into was dropped, so the attempt's next blocks read them
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(10)}
    groups(ctx, side.target, namespace, 5, start=10)
    with TaskState(ctx, component="c", namespace=namespace, sidecar=side.target) as s:
        assert dict(s) == {f"g{i}": 1 for i in range(15)}
    assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == "OK 5"
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(15)}


def test_a_commit_inside_a_later_group_lands_after_what_earlier_groups_held(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    """`s.commit()` in a group while earlier groups' changes are held: the held older
    value is committed first, so it never overwrites the newer one at the flush."""
    side, barrier = barrier_sidecar
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, side.target, namespace, 1)  # the attempt's first block: committed
    with TaskState(ctx, component="c", namespace=namespace, sidecar=side.target) as s:
        s["k"] = 2  # held for the flush
    assert buffer.holds(ctx.taskAttemptId())
    with TaskState(ctx, component="c", namespace=namespace, sidecar=side.target) as s:
        s["k"] = 3
        s.commit()
        assert stored(redis_server, namespace, int) == {"g0": 1, "k": 3}
    assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == "OK 0"
    assert stored(redis_server, namespace, int) == {"g0": 1, "k": 3}
    ctx2 = plugin_ctx(0, batch_id=2)
    with TaskState(ctx2, component="c", namespace=namespace, sidecar=side.target) as s:
        assert s["k"] == 3  # the next batch, from this worker's copy: the same as Redis


def test_a_block_after_a_failed_held_commit_reads_what_its_attempt_held(
    barrier_sidecar: tuple[SidecarProcess, Path],
    redis_server: RedisServer,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A block raises and its attempt's held changes fail to commit (the job catches the
    error and goes on): the attempt's next block commits them before it reads Redis, so
    it neither misses them nor builds on values without them."""
    side, barrier = barrier_sidecar
    ctx = plugin_ctx(0, batch_id=1)
    groups(ctx, side.target, namespace, 4)  # g0 committed at its exit, g1-g3 held
    real = Transport.commit
    failures = [2]  # the failed block's two tries at committing what was held

    def commit(self: Transport, req: Any, task: str) -> Any:
        if failures[0] > 0:
            failures[0] -= 1
            raise StorageUnavailableError(f"task {task}: injected", task)
        return real(self, req, task)

    monkeypatch.setattr(Transport, "commit", commit)
    with pytest.raises(StorageUnavailableError):
        with TaskState(ctx, component="c", namespace=namespace, sidecar=side.target) as s:
            s["g4"] = 1
            raise ValueError("boom")
    assert failures == [0] and stored(redis_server, namespace, int) == {"g0": 1}
    with TaskState(ctx, component="c", namespace=namespace, sidecar=side.target) as s:
        assert s.get("g1") == 1 and "g4" not in s
        s["g5"] = (s.get("g3") or 0) + 1
    assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(4)}
    assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == "OK 1"
    assert stored(redis_server, namespace, int) == {**{f"g{i}": 1 for i in range(4)}, "g5": 2}


def _finished_batch(side: SidecarProcess, barrier: Path, namespace: str) -> dict[str, int]:
    """Batch 0 and then batch 1 (20 groups) finished by attempts of application "app"."""
    base = plugin_ctx(0, batch_id=0, app_id="app", task_attempt_id=9_000_001)
    groups(base, side.target, namespace, 1)
    assert ask(barrier, f"FLUSH {base.taskAttemptId()}") == "OK 0"
    first = plugin_ctx(0, batch_id=1, app_id="app", task_attempt_id=9_000_010)
    groups(first, side.target, namespace, 20)
    assert ask(barrier, f"FLUSH {first.taskAttemptId()}") == "OK 19"
    return {"g0": 2, **{f"g{i}": 1 for i in range(1, 20)}}


def _late_attempt_killed(side: SidecarProcess, barrier: Path, namespace: str) -> dict[str, int]:
    """`_finished_batch`, then attempt 12 replays batch 1 and is killed after 1 of 5 groups."""
    finished = _finished_batch(side, barrier, namespace)
    late = plugin_ctx(0, batch_id=1, app_id="app", task_attempt_id=9_000_012)
    groups(late, side.target, namespace, 5)
    assert ask(barrier, f"DISCARD {late.taskAttemptId()}") == "OK 0"
    return finished


@pytest.mark.parametrize("late_attempt", ["killed", "finished"])
def test_a_late_attempt_that_replays_a_finished_batch_never_leaves_half_of_it(
    barrier_sidecar: tuple[SidecarProcess, Path],
    redis_server: RedisServer,
    namespace: str,
    late_attempt: str,
) -> None:
    """Spark counts the first attempt that reports success and kills the other copies.

    A stage retry launched attempt 12 of a partition whose attempt 10 (of the failed stage
    attempt) still ran; 10 finished batch 1 first, and 12 opened only then. 12 rolls the
    finished batch back and recomputes it; Spark kills it when the stage ends, after its
    first group. That used to leave half of batch 1 for batch 2 to build on. Now the
    finished batch was kept aside and batch 2's first Open makes it the state again; had
    12 finished (a map task Spark ran again), its own equal state stands.
    """
    side, barrier = barrier_sidecar
    finished = _finished_batch(side, barrier, namespace)
    assert stored(redis_server, namespace, int) == finished
    late = plugin_ctx(0, batch_id=1, app_id="app", task_attempt_id=9_000_012)
    stash = redis_server.client().exists(stash_key(TaskKey(namespace, "c", 0)))
    if late_attempt == "killed":
        groups(late, side.target, namespace, 5)  # rolled back, then 1 group, 4 held
        assert stored(redis_server, namespace, int) == {"g0": 2}  # half a batch
        assert ask(barrier, f"DISCARD {late.taskAttemptId()}") == "OK 0"
    else:
        groups(late, side.target, namespace, 20)
        assert ask(barrier, f"FLUSH {late.taskAttemptId()}") == "OK 19"
        assert not redis_server.client().exists(stash_key(TaskKey(namespace, "c", 0)))
    assert not stash
    nxt = plugin_ctx(0, batch_id=2, app_id="app", task_attempt_id=9_000_030)
    with TaskState(nxt, component="c", namespace=namespace, sidecar=side.target) as s:
        assert dict(s) == finished
    assert stored(redis_server, namespace, int) == finished
    assert not redis_server.client().exists(stash_key(TaskKey(namespace, "c", 0)))


def test_a_replay_by_a_new_application_keeps_nothing_aside(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    """A restarted query replays batch 1 because Spark never counted it: no stash."""
    side, barrier = barrier_sidecar
    _finished_batch(side, barrier, namespace)
    replay = plugin_ctx(0, batch_id=1, app_id="app-after", task_attempt_id=3)
    with TaskState(replay, component="c", namespace=namespace, sidecar=side.target) as s:
        assert dict(s) == {"g0": 1}  # batch 1 rolled back
    assert not redis_server.client().exists(stash_key(TaskKey(namespace, "c", 0)))


def test_a_flush_after_another_attempt_took_the_batch_fails(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    """The finished mark is only for the attempt that still holds the claim.

    Attempt 20 wrote its one block; speculative attempt 22 claimed the task (rolling 20's
    block back) before 20's task ended. 20 must not be reported done: its FLUSH fails
    (the plugin stops the executor), though it held nothing.
    """
    side, barrier = barrier_sidecar
    original = plugin_ctx(0, batch_id=1, app_id="app", task_attempt_id=9_000_020)
    with TaskState(original, component="c", namespace=namespace, sidecar=side.target) as s:
        s["k"] = "original"
    copy = plugin_ctx(0, batch_id=1, app_id="app", task_attempt_id=9_000_022)
    with TaskState(copy, component="c", namespace=namespace, sidecar=side.target) as s:
        assert dict(s) == {}  # the original's block rolled back
    answer = ask(barrier, f"FLUSH {original.taskAttemptId()}")
    assert answer.startswith("FAIL ") and "another attempt claimed batch 1" in answer
    assert ask(barrier, f"FLUSH {copy.taskAttemptId()}") == "OK 0"
    assert stored(redis_server, namespace) == {}


def test_a_finished_batch_kept_aside_and_lost_is_refused_not_emptied(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    """Redis lost the copy of the finished batch: the next batch refuses, writes nothing."""
    side, barrier = barrier_sidecar
    _late_attempt_killed(side, barrier, namespace)
    c = redis_server.client()
    assert c.delete(stash_key(TaskKey(namespace, "c", 0))) == 1  # evicted, say
    before = snapshot(redis_server, namespace)
    nxt = plugin_ctx(0, batch_id=2, app_id="app", task_attempt_id=9_000_030)
    with pytest.raises(StateLostError) as lost:
        TaskState(nxt, component="c", namespace=namespace, sidecar=side.target).__enter__()
    assert "the copy of batch 1 (20 key(s))" in str(lost.value)
    assert snapshot(redis_server, namespace) == before


def test_a_rescale_waits_for_the_batch_that_restores_a_finished_batch_kept_aside(
    barrier_sidecar: tuple[SidecarProcess, Path], redis_server: RedisServer, namespace: str
) -> None:
    """A rescale would copy the late attempt's half batch: refused until the next batch."""
    side, barrier = barrier_sidecar
    finished = _late_attempt_killed(side, barrier, namespace)
    before = snapshot(redis_server, namespace)

    async def rescale() -> list[str]:
        backend = RedisBackend(redis_server.url)
        try:
            return [p.phase async for p in backend.admin.rescale(namespace, "c", 2, "string", 0)]
        finally:
            await backend.close()

    with pytest.raises(SidecarError) as refused:
        asyncio.run(rescale())
    assert refused.value.code == codes.CHANGED
    assert f"task {namespace}/c/0: batch 1 was finished" in str(refused.value)
    assert "Run the query for one more batch" in str(refused.value)
    assert snapshot(redis_server, namespace) == before
    nxt = plugin_ctx(0, batch_id=2, app_id="app", task_attempt_id=9_000_030)
    with TaskState(nxt, component="c", namespace=namespace, sidecar=side.target) as s:
        assert dict(s) == finished
    assert asyncio.run(rescale())[-1] == "done"


@pytest.mark.parametrize("replaced_by", ["import --replace", "data source overwrite"])
def test_a_task_replaced_while_a_finished_batch_waits_aside_drops_the_copy(
    barrier_sidecar: tuple[SidecarProcess, Path],
    redis_server: RedisServer,
    namespace: str,
    replaced_by: str,
) -> None:
    """The copy belongs to the generation an import or an overwriting write ends: it goes
    with it (its key used to stay until the next copy or `taskstate drop`), and the next
    batch goes on from what was written, not from the copy."""
    side, barrier = barrier_sidecar
    _late_attempt_killed(side, barrier, namespace)
    c = redis_server.client()
    stash = stash_key(TaskKey(namespace, "c", 0))
    assert c.exists(stash)
    if replaced_by == "import --replace":

        async def replace() -> None:
            backend = RedisBackend(redis_server.url)
            try:
                await backend.admin.import_task(
                    TaskKey(namespace, "c", 0), [("k", b"1")], committed_batch=5,
                    position=None, codec="json", replace=True, append_epoch=None,
                )  # fmt: skip
            finally:
                await backend.close()

        asyncio.run(replace())
    else:
        with AdminClient(side.target) as admin:
            seed = begin(admin, namespace, 1, overwrite=True, quiet_seconds=0, batch=5).seed_id
            stage(admin, namespace, seed, 0, 0, {"k": 1})
            commit(admin, namespace, seed, {0: 0})
    assert not c.exists(stash)
    assert not any(f.startswith(b"stash_") for f in c.hkeys(task_key(namespace, "c", 0, "meta")))
    nxt = plugin_ctx(0, batch_id=6, app_id="app", task_attempt_id=9_000_040)
    with TaskState(nxt, component="c", namespace=namespace, sidecar=side.target) as s:
        assert dict(s) == {"k": 1}


@pytest.mark.parametrize("when", ["mid-batch", "during the flush", "its journal lost"])
def test_a_sidecar_restarted_while_a_worker_holds_changes_still_flushes_them(
    redis_server: RedisServer, namespace: str, tmp_path: Path, when: str
) -> None:
    """The worker, alive with its held changes, attaches to the restarted sidecar.

    Mid-batch: the sidecar is SIGKILLed after the worker registered its changes. During the
    flush: it is SIGKILLed when the worker receives the FLUSH order, so that the worker's
    answer dies with it and the plugin asks the new sidecar again. Its journal lost: the
    new sidecar knows nothing of the attempt, so no FLUSH of it would come; the worker
    commits what it holds as soon as it is told so (ATTACHED adopts nothing).
    """
    from taskstate.testing.worker import before_flush

    barrier = tmp_path / "b.sock"
    side = SidecarProcess(
        redis_server.url,
        tmp_path / "s.sock",
        extra=["--barrier", str(barrier), "--flush-timeout", "30", "--metrics-port", "0"],
    ).start()
    try:
        ctx = plugin_ctx(0, batch_id=1)
        groups(ctx, side.target, namespace, 50)
        assert buffer.holds(ctx.taskAttemptId())
        if when == "its journal lost":
            side.kill()
            barrier.with_suffix(".journal").unlink()
            side.start()
            eventually(lambda: not buffer.holds(ctx.taskAttemptId()), "the worker committed", 30)
            answer = ask(barrier, f"FLUSH {ctx.taskAttemptId()}")
        elif when == "mid-batch":
            side.kill()
            side.start()
            groups(ctx, side.target, namespace, 10, start=50)  # later groups, new sidecar
            answer = ask(barrier, f"FLUSH {ctx.taskAttemptId()}")
        else:
            killed = threading.Event()

            def kill_sidecar(attempt: int) -> None:
                if not killed.is_set():
                    side.kill()
                    killed.set()

            restore = buffer.flush
            before_flush(kill_sidecar)
            try:
                # the connection dies with the sidecar: no answer
                assert ask(barrier, f"FLUSH {ctx.taskAttemptId()}") == ""
                assert killed.wait(60)
                side.start()
                answer = ask(barrier, f"FLUSH {ctx.taskAttemptId()}")  # as the plugin asks again
            finally:
                buffer.flush = restore  # type: ignore[method-assign]
        if when == "mid-batch":  # blocks before the worker attached again committed themselves
            assert answer.startswith("OK ") and 0 <= int(answer[3:]) <= 59, answer
        elif when == "during the flush":  # the answer the worker gave the killed sidecar, again
            assert answer == "OK 49", answer
        else:  # nothing deferred that this sidecar knows of
            assert answer == "OK 0", answer
        n = 60 if when == "mid-batch" else 50
        assert stored(redis_server, namespace, int) == {f"g{i}": 1 for i in range(n)}
        reattached = 0 if when == "its journal lost" else 1
        assert side.metrics().get("taskstate_workers_reattached_total", 0) == reattached
    finally:
        side.kill()
