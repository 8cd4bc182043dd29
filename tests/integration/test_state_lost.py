"""State that Redis lost half of, or all of, is refused at Open, never taken for a start.

Each case deletes keys behind a real sidecar's back, as eviction, a FLUSHALL or a
failover would; Open must fail with StateLostError naming the task and the operator
action, and write nothing; the explicit reset (`taskstate drop`) then lets the job on.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from taskstate.client import LocalContext, StateLostError, TaskState
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer, SidecarProcess

from .conftest import snapshot, stored


def run_batch(side: SidecarProcess, ns: str, batch: int, keys: int = 200) -> None:
    """One batch of a task that adds `batch + 1` to each of `keys` counters."""
    with TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns,
                   sidecar=side.target) as s:  # fmt: skip
        for i in range(keys):
            s[f"k{i}"] = s.get(f"k{i}", 0) + batch + 1


def open_fails(side: SidecarProcess, r: RedisServer, ns: str, batch: int) -> str:
    """Open at `batch` must fail with StateLostError and leave Redis exactly as it was."""
    before = snapshot(r, ns)
    with pytest.raises(StateLostError) as info:
        run_batch(side, ns, batch)
    assert snapshot(r, ns) == before, "a refused Open wrote something"
    message = str(info.value)
    assert f"task {ns}/c/0" in message and f"taskstate drop {ns}/c/0 --yes" in message
    assert "Nothing was changed" in message and "taskstate import" in message
    return message


def drop(side: SidecarProcess, task: str) -> None:
    cmd = [sys.executable, "-m", "taskstate.cli.main", "drop", task, "--yes",
           "--sidecar", side.target]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)  # noqa: S603


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
