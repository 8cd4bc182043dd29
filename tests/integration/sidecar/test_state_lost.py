"""State that Redis lost half of, or all of, is refused at Open, never taken for a start.

Each case deletes keys behind a real sidecar's back, as eviction, a FLUSHALL, a restart
without persistence or a failover would; Open must fail with StateLostError naming the
task and the operator action, and write nothing; the explicit reset (`taskstate drop`
for a task, `taskstate adopt` for a namespace) then lets the job on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from taskstate.client import LocalContext, StateLostError, TaskState
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import snapshot, stored


def run_batch(side: SidecarProcess, ns: str, batch: int, keys: int = 200) -> None:
    """One batch of a task that adds `batch + 1` to each of `keys` counters."""
    with TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns,
                   sidecar=side.target) as s:  # fmt: skip
        for i in range(keys):
            s[f"k{i}"] = s.get(f"k{i}", 0) + batch + 1


def refused(side: SidecarProcess, r: RedisServer, ns: str, batch: int) -> str:
    """Open at `batch` must fail with StateLostError, leave Redis exactly as it was, and
    name the operator's way back; the message."""
    before = snapshot(r, ns)
    with pytest.raises(StateLostError) as info:
        run_batch(side, ns, batch)
    assert snapshot(r, ns) == before, "a refused Open wrote something"
    message = str(info.value)
    assert "Nothing was changed" in message and "taskstate import" in message
    return message


def open_fails(side: SidecarProcess, r: RedisServer, ns: str, batch: int) -> str:
    """A task's loss: refused, naming the task and its drop."""
    message = refused(side, r, ns, batch)
    assert f"task {ns}/c/0" in message and f"taskstate drop {ns}/c/0 --yes" in message
    return message


def cli(side: SidecarProcess, *args: str) -> str:
    cmd = [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", side.target]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)
    return done.stdout


def drop(side: SidecarProcess, task: str) -> None:
    cli(side, "drop", task, "--yes")


def namespace_lost(side: SidecarProcess, r: RedisServer, ns: str, batch: int) -> None:
    """Open at `batch` must fail: Redis has no record of the namespace; nothing written."""
    message = refused(side, r, ns, batch)
    assert f"task {ns}/c/0: Spark runs batch {batch}, but Redis has no record of namespace" in (
        message
    )
    assert f"`taskstate adopt {ns}`" in message


def test_metadata_whose_data_is_gone_is_refused(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for batch in range(3):
        run_batch(sidecar, namespace, batch)
    redis_server.client().delete(data_key(namespace, "c", 0))  # evicted, say
    message = open_fails(sidecar, redis_server, namespace, 3)
    assert "metadata says batch 2 and 200 key(s), but its data is gone" in message
    assert "Spark runs batch 3" in message
    # the explicit reset: the task starts empty at the batch Spark runs
    drop(sidecar, f"{namespace}/c/0")
    run_batch(sidecar, namespace, 3)
    assert len(stored(redis_server, namespace)) == 200


def test_data_without_its_metadata_is_refused(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for batch in range(3):
        run_batch(sidecar, namespace, batch)
    redis_server.client().delete(meta_key(namespace, "c", 0))
    message = open_fails(sidecar, redis_server, namespace, 3)
    assert "200 key(s) of its data are in Redis without the metadata" in message
    drop(sidecar, f"{namespace}/c/0")
    run_batch(sidecar, namespace, 3)
    assert stored(redis_server, namespace)["k0"] == b"4"  # started empty, on purpose


def test_a_task_the_index_knows_with_no_keys_left_is_refused(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for batch in range(2):
        run_batch(sidecar, namespace, batch)
    c = redis_server.client()
    c.delete(meta_key(namespace, "c", 0), data_key(namespace, "c", 0))
    message = open_fails(sidecar, redis_server, namespace, 2)
    assert "index says this task had state, but none of its keys" in message
    drop(sidecar, f"{namespace}/c/0")
    run_batch(sidecar, namespace, 2)


def test_a_task_that_never_had_state_and_one_that_was_emptied_open_normally(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    # another partition of the query ran from batch 0: the namespace is known
    with TaskState(LocalContext(1, batch_id=0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s["x"] = 1
    # a partition that sees its first key at batch 5 (normal for applyInPandasWithState)
    run_batch(sidecar, namespace, 5, keys=3)
    # a job that deletes every key it had: no data hash, and nothing is lost
    ctx = LocalContext(0, batch_id=6)
    with TaskState(ctx, component="c", namespace=namespace, sidecar=sidecar.target) as s:
        for k in list(s.keys()):
            del s[k]
    assert stored(redis_server, namespace) == {}
    run_batch(sidecar, namespace, 7, keys=1)
    assert stored(redis_server, namespace) == {"k0": b"8"}


def test_flushall_under_a_running_namespace_is_refused_until_adopted(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for batch in range(3):
        run_batch(sidecar, namespace, batch)
    redis_server.client().flushall()
    namespace_lost(sidecar, redis_server, namespace, 3)
    # a batch job (no batch id) cannot be told from a first run: it starts empty
    # (docs/operations/runbooks.md#state-lost says so); a streaming task past batch 0 is
    # refused every time
    namespace_lost(sidecar, redis_server, namespace, 4)
    # accepting the loss on purpose: one command, then the query runs on, empty
    out = cli(sidecar, "adopt", namespace)
    assert f"namespace {namespace}: adopted" in out
    run_batch(sidecar, namespace, 3)
    assert stored(redis_server, namespace)["k0"] == b"4"
    assert "already known (1 task(s)" in cli(sidecar, "adopt", namespace)


def test_a_redis_restarted_without_persistence_is_refused_until_adopted(
    tmp_path: Path, namespace: str
) -> None:
    with RedisServer(tmp_path / "redis") as r, SidecarProcess(r.url, tmp_path / "s.sock") as side:
        for batch in range(2):
            run_batch(side, namespace, batch)
        assert len(stored(r, namespace)) == 200
        r.stop()  # no AOF, no RDB: everything is gone
        r.start()
        # the worker still holds its copy of the task: Open is refused all the same
        namespace_lost(side, r, namespace, 2)
        cli(side, "adopt", namespace)
        run_batch(side, namespace, 2)
        assert stored(r, namespace)["k0"] == b"3"


def test_a_query_that_adds_taskstate_past_batch_0_is_adopted_explicitly(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    ns = f"{namespace}-late"  # not known to Redis (the fixture's is)
    namespace_lost(sidecar, redis_server, ns, 500)
    assert "adopted" in cli(sidecar, "adopt", ns)
    run_batch(sidecar, ns, 500)
    run_batch(sidecar, ns, 501)
    assert stored(redis_server, ns)["k0"] == b"1003"  # 501 + 502


def test_dropping_every_task_keeps_the_namespace_known(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    run_batch(sidecar, namespace, 0)
    drop(sidecar, namespace)  # an explicit reset of the whole namespace
    run_batch(sidecar, namespace, 1)  # starts empty, not refused
    assert stored(redis_server, namespace)["k0"] == b"2"


def test_size_written_by_an_older_sidecar_is_not_taken_for_lost_data(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    """In a rolling upgrade a sidecar from before `size` may commit after ours: it bumps
    the version without `size_ver`, so a stale size must not flag data it deleted."""
    run_batch(sidecar, namespace, 0)
    c = redis_server.client()
    meta = meta_key(namespace, "c", 0)
    assert c.hget(meta, "size") == b"200" and c.hget(meta, "size_ver") == c.hget(meta, "ver")
    c.hincrby(meta, "ver", 1)  # the older sidecar's commit: every key deleted
    c.hset(meta, "batch", "1")
    c.delete(data_key(namespace, "c", 0))
    run_batch(sidecar, namespace, 2, keys=1)
    assert stored(redis_server, namespace) == {"k0": b"3"}


def test_redis_behind_what_the_sidecar_saw_committed_is_refused_until_adopted(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    """A failover to a replica that missed the last commit, as this sidecar sees it: the
    task's keys go back to an older version of the same generation."""
    c = redis_server.client()
    keys = [meta_key(namespace, "c", 0), data_key(namespace, "c", 0)]
    for batch in range(2):
        run_batch(sidecar, namespace, batch)
    replica = {k: c.dump(k) for k in keys}  # what a lagging replica holds: batch 1
    run_batch(sidecar, namespace, 2)  # acknowledged by the primary, then lost with it
    for k, v in replica.items():
        c.restore(k, 0, v, replace=True)
    message = open_fails(sidecar, redis_server, namespace, 3)
    assert "Redis holds batch 1" in message and "this sidecar saw batch 2" in message
    assert "Redis lost its latest commits" in message and "replicated:N" in message
    assert f"`taskstate adopt {namespace}`" in message
    open_fails(sidecar, redis_server, namespace, 3)  # every retry of the task, the same
    # accepting the older state on purpose: the job goes on from batch 1's state
    cli(sidecar, "adopt", namespace)
    run_batch(sidecar, namespace, 3)
    assert stored(redis_server, namespace)["k0"] == b"7"  # 1 + 2 + 4: batch 2 is lacking
    run_batch(sidecar, namespace, 4)  # and the sidecar checks the new versions again
    assert stored(redis_server, namespace)["k0"] == b"12"


def test_a_misspelt_namespace_names_the_similar_one_that_holds_the_component(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    run_batch(sidecar, namespace, 0, keys=3)
    typo = namespace + "x"
    message = refused(sidecar, redis_server, typo, 1)
    assert f"Namespace '{namespace}' of a similar name holds component 'c'" in message
    assert f"`taskstate adopt {typo}`" in message
    other = refused(sidecar, redis_server, "zz9-" + namespace[::-1], 1)
    assert "of a similar name" not in other
