"""A change of partition count is refused, never silent; `taskstate rescale` moves the keys.

A job here is what mapInPandas over `repartition(n, "key")` does: every one of its n
tasks opens at every batch and adds the batch's values of the keys Spark routes to it
(`partition_of`, checked against Spark itself in tests/e2e/sidecar/test_spark_hash.py), with
`TaskState(..., partitions=n)`. Real redis-server, real sidecar, the real CLI.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from taskstate.client import LocalContext, PartitionCountError, TaskState
from taskstate.sidecar.spark_hash import partition_of
from taskstate.sidecar.storage.redis.backend import RedisBackend
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import snapshot

COMPONENT = "c"


def events(batch: int, keys: int = 60) -> list[tuple[str, int]]:
    """A batch's events: keys k0.. with values that differ by batch and key."""
    return [(f"k{i}", batch * 100 + i + 1) for i in range(keys) if (i + batch) % 3 != 0]


def run_batch(
    side: SidecarProcess, ns: str, n: int, batch: int, evs: list[tuple[str, int]]
) -> None:
    """Batch `batch` of the job with `n` partitions: every task opens; each adds its keys."""
    for p in range(n):
        with TaskState(LocalContext(p, batch_id=batch), component=COMPONENT, namespace=ns,
                       sidecar=side.target, partitions=n) as s:  # fmt: skip
            for k, v in evs:
                if partition_of(k, n) == p:
                    s[k] = s.get(k, 0) + v


def totals(batches: range, keys: int = 60) -> Counter[str]:
    out: Counter[str] = Counter()
    for b in batches:
        for k, v in events(b, keys):
            out[k] += v
    return out


def layout(r: RedisServer, ns: str, n: int) -> dict[int, dict[str, int]]:
    """Each task's stored data, decoded; and no task at or beyond `n`."""
    c = r.client()
    out = {}
    for p in range(n):
        out[p] = {
            k.decode(): orjson.loads(v) for k, v in c.hgetall(data_key(ns, COMPONENT, p)).items()
        }
    assert not c.exists(data_key(ns, COMPONENT, n), meta_key(ns, COMPONENT, n)), (
        "a task beyond the count"
    )
    return out


def assert_placed(r: RedisServer, ns: str, n: int, expected: Counter[str]) -> None:
    """Every key lives in the task Spark sends it to for `n` partitions, with its exact total."""
    seen: dict[str, int] = {}
    for p, data in layout(r, ns, n).items():
        for k, v in data.items():
            assert partition_of(k, n) == p, (
                f"{k} in task {p}, Spark sends it to {partition_of(k, n)}"
            )
            assert k not in seen, f"{k} in two tasks"
            seen[k] = v
    assert seen == dict(expected)


def cli(side: SidecarProcess, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", side.target]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert not check or done.returncode == 0, f"{args} failed: {done.stderr}"
    return done


def rescale(
    side: SidecarProcess, ns: str, to: int, *extra: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return cli(side, "rescale", f"{ns}/{COMPONENT}", "--to", str(to), "--quiet-seconds", "0",
               *extra, check=check)  # fmt: skip


def refused_open(side: SidecarProcess, r: RedisServer, ns: str, p: int, batch: int,
                 partitions: int | None) -> str:  # fmt: skip
    before = snapshot(r, ns)
    with pytest.raises(PartitionCountError) as info:
        with TaskState(LocalContext(p, batch_id=batch), component=COMPONENT, namespace=ns,
                       sidecar=side.target, partitions=partitions):  # fmt: skip
            pass
    assert snapshot(r, ns) == before, "a refused Open wrote something"
    assert "Nothing was changed" in str(info.value)
    return str(info.value)


def test_another_partition_count_is_refused_and_changes_nothing(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for b in range(3):
        run_batch(sidecar, namespace, 4, b, events(b))
    # a task the state has, under another count
    message = refused_open(sidecar, redis_server, namespace, 0, 3, 8)
    assert f"task {namespace}/c/0" in message
    assert "split into 4 partitions" in message and "declares 8" in message
    assert f"taskstate rescale {namespace}/c --to 8" in message
    # a task the state never had (partition 5 of 8): the component's record says 4
    message = refused_open(sidecar, redis_server, namespace, 5, 3, 8)
    assert f"taskstate rescale {namespace}/c --to 8" in message
    # a job that does not declare a count still cannot open a partition outside it
    message = refused_open(sidecar, redis_server, namespace, 6, 3, None)
    assert "partition 6, outside that count" in message
    # fewer partitions: refused too
    refused_open(sidecar, redis_server, namespace, 1, 3, 3)
    # the job under its own count runs on
    run_batch(sidecar, namespace, 4, 3, events(3))
    assert_placed(redis_server, namespace, 4, totals(range(4)))


def test_rescale_up_and_down_keeps_every_total_and_the_batch(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for b in range(3):
        run_batch(sidecar, namespace, 4, b, events(b))
    done = rescale(sidecar, namespace, 8)
    assert (
        f"{namespace}/c: 4 -> 8 partitions" in done.stdout
        and "committed batch 2 kept" in done.stdout
    )
    assert "writing targets 8/8" in done.stderr  # progress
    assert_placed(redis_server, namespace, 8, totals(range(3)))
    assert redis_server.client().hget(meta_key(namespace, COMPONENT, 5), "batch") == b"2"
    for b in range(3, 5):
        run_batch(sidecar, namespace, 8, b, events(b))
    assert_placed(redis_server, namespace, 8, totals(range(5)))
    refused_open(sidecar, redis_server, namespace, 0, 5, 3)
    done = rescale(sidecar, namespace, 3)
    assert "8 -> 3 partitions" in done.stdout
    assert_placed(redis_server, namespace, 3, totals(range(5)))
    listed = cli(sidecar, "ls", namespace, "--json").stdout
    listed_tasks = sorted(t["task"] for t in orjson.loads(listed))
    assert listed_tasks == [f"{namespace}/c/{p}" for p in range(3)]
    run_batch(sidecar, namespace, 3, 5, events(5))
    assert_placed(redis_server, namespace, 3, totals(range(6)))
    again = rescale(sidecar, namespace, 3)
    assert "already split into 3 partitions; nothing moved" in again.stdout


@pytest.mark.parametrize("touched", [10, 60], ids=["fields-rollback", "copy-rollback"])
def test_a_replay_of_the_last_batch_after_a_rescale_rolls_back_exactly_that_batch(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str, touched: int
) -> None:
    """Spark stopped after the tasks committed batch 2 and before its own commit: the
    restarted query replays batch 2, now with 8 partitions. The rollback records moved
    with their keys, so the replay counts batch 2 once. Touching every key makes the
    batch's rollback record a whole copy (copy mode), a few keys a per-key record."""
    for b in range(2):
        run_batch(sidecar, namespace, 4, b, events(b))
    run_batch(sidecar, namespace, 4, 2, events(2, touched) + [("new-in-2", 7)])
    rescale(sidecar, namespace, 8)
    run_batch(sidecar, namespace, 8, 2, events(2, touched) + [("new-in-2", 7)])  # the replay
    expected = totals(range(2)) + totals(range(2, 3), touched) + Counter({"new-in-2": 7})
    assert_placed(redis_server, namespace, 8, expected)


def test_a_bad_key_type_or_a_running_query_is_refused_and_changes_nothing(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    run_batch(sidecar, namespace, 4, 0, events(0))
    before = snapshot(redis_server, namespace)
    busy = cli(sidecar, "rescale", f"{namespace}/c", "--to", "8", check=False)  # quiet: 30 s
    assert busy.returncode == 1, busy
    # written within the quiet window (the CLI's start under load may take a second)
    ago = re.search(r"was written (\d+) s ago", busy.stderr)
    assert ago is not None and int(ago.group(1)) < 30 and "Stop the query" in busy.stderr
    bad = rescale(sidecar, namespace, 8, "--key-type", "int", check=False)
    assert bad.returncode == 1, bad
    assert "cannot be read as a int" in bad.stderr and "--key-type" in bad.stderr
    assert snapshot(redis_server, namespace) == before
    usage = cli(sidecar, "rescale", namespace, "--to", "8", check=False)
    assert usage.returncode == 2 and "NAMESPACE/COMPONENT" in usage.stderr


def interrupt(redis_server: RedisServer, ns: str, to: int, phase: str, after: int) -> None:
    """Run the sidecar's rescale in this process and abandon it after `phase` step `after`
    (as when its caller or its sidecar goes away there)."""

    async def run() -> None:
        storage = RedisBackend(redis_server.url)
        steps = cast(
            AsyncGenerator[Any, None], storage.admin.rescale(ns, COMPONENT, to, "string", 0.0)
        )
        try:
            async for step in steps:
                if step.phase == phase and step.done == after:
                    break
            else:
                raise AssertionError(f"the rescale finished before {phase} {after}")
        finally:
            await steps.aclose()
            await storage.close()

    asyncio.run(run())


@pytest.mark.parametrize(("phase", "after"), [("copy", 2), ("commit", 3)])
def test_an_interrupted_rescale_holds_the_component_and_the_next_run_finishes_it(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str, phase: str, after: int
) -> None:
    for b in range(3):
        run_batch(sidecar, namespace, 4, b, events(b))
    interrupt(redis_server, namespace, 8, phase, after)
    # half done: every task of the component that is not written yet is refused
    for p in (after + 2, 6):  # a source not yet written; a target that is new
        message = refused_open(sidecar, redis_server, namespace, p, 3, 8)
        assert f"`taskstate rescale {namespace}/c --to 8` is moving" in message
    other = rescale(sidecar, namespace, 5, check=False)
    assert other.returncode == 1 and "--to 8" in other.stderr
    held = cli(sidecar, "export", namespace, check=False)  # its state is half moved
    assert held.returncode == 2 and "a `taskstate rescale` holds its tasks" in held.stderr
    assert held.stdout == ""
    done = rescale(sidecar, namespace, 8)
    assert "finishing the rescale to 8 that an earlier run began" in done.stderr
    assert_placed(redis_server, namespace, 8, totals(range(3)))
    run_batch(sidecar, namespace, 8, 3, events(3))
    assert_placed(redis_server, namespace, 8, totals(range(4)))


def test_a_rescale_whose_sidecar_is_killed_mid_copy_is_finished_by_the_next_run(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """SIGKILL the sidecar doing the work while it copies, then run the same command."""
    keys = 40_000
    with SidecarProcess(redis_server.url, tmp_path / "a.sock") as side:
        run_batch(side, namespace, 4, 0, events(0, keys))
        cmd = [sys.executable, "-m", "taskstate.cli.main", "rescale", f"{namespace}/c", "--to",
               "8", "--quiet-seconds", "0", "--sidecar", side.target]  # fmt: skip
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            if "copying sources 1/4" in line:
                side.kill(signal.SIGKILL)
                break
        else:
            raise AssertionError("the rescale never reported its copy")
        assert proc.wait(timeout=60) == 1
    record = redis_server.client().hget(f"ts:ns:{{{namespace}}}", "rescale/c")
    assert record is not None and orjson.loads(record)["phase"] == "copy", "it was not mid-way"
    with SidecarProcess(redis_server.url, tmp_path / "b.sock") as side:
        done = rescale(side, namespace, 8)
        assert "finishing the rescale to 8" in done.stderr
        assert_placed(redis_server, namespace, 8, totals(range(1), keys))
        run_batch(side, namespace, 8, 1, events(1, keys))
    assert_placed(redis_server, namespace, 8, totals(range(2), keys))


def test_dropping_a_component_forgets_its_partition_count(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    run_batch(sidecar, namespace, 4, 0, events(0))
    cli(sidecar, "drop", f"{namespace}/{COMPONENT}", "--yes")
    run_batch(sidecar, namespace, 6, 1, events(1))  # starts again, under a new count
    assert_placed(redis_server, namespace, 6, totals(range(1, 2)))
