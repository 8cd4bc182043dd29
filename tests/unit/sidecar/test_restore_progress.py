"""A long full restore reports its progress: a per-task gauge while it runs, a log line with
an ETA, and nothing left behind when it ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto.durability import Durability
from taskstate.sidecar import metrics, read
from taskstate.sidecar.storage.redis.backend import RedisBackend
from taskstate.sidecar.storage.values import ChangeSet, TaskKey
from taskstate.testing import RedisServer


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with RedisServer() as r:
        yield r.url


KEYS = 1000  # past Redis' listpack size: its HSCAN pages the hash


def _gauge(task: str, kind: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        "taskstate_restore_progress_keys", {"task": task, "kind": kind}
    )


def test_progress_is_logged_with_an_eta_and_the_gauge_is_removed_at_the_end(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, redis_url: str
) -> None:
    monkeypatch.setattr(read, "PROGRESS_AFTER_S", 0.0)  # report from the first page
    monkeypatch.setattr(read, "PROGRESS_EVERY_S", 0.0)
    store = RedisBackend(redis_url)
    task = TaskKey("ns", "c", 0)
    seen: list[tuple[float | None, float | None]] = []

    async def run() -> list[pb.ReadChunk]:
        r = await store.tasks.open(task, 0, codec="json", writer="w", durability=Durability())
        changes = ChangeSet.of([(f"k{i}", b"1") for i in range(KEYS)], [])
        await store.tasks.commit(task, r.epoch, 0, changes, None,
                                 writer="w", durability=Durability())  # fmt: skip
        out = []
        async for chunk in read.restore(store.tasks, task, r.epoch, 200, "", False):
            seen.append((_gauge(task.fq, "restored"), _gauge(task.fq, "expected")))
            out.append(chunk)
        return out

    before = metrics.REGISTRY.get_sample_value("taskstate_restores_total", {"kind": "full"}) or 0
    with caplog.at_level(logging.INFO, logger="taskstate.sidecar.restore"):
        chunks: Any = asyncio.run(run())
    got = sum(len(msgpack.unpackb(c.packed)) // 2 for c in chunks if c.packed)
    assert got == KEYS and chunks[-1].last
    # while it ran: the keys sent so far of those expected (set after each page is sent)
    restored = [float(n or 0) for n, _ in seen[1:]]
    assert seen[0] == (None, None) and {e for _, e in seen[1:]} == {float(KEYS)}
    assert len(restored) >= 3 and restored == sorted(set(restored)) and restored[-1] == KEYS
    lines = [r for r in caplog.records if r.getMessage() == "restoring"]
    assert [float(r.__dict__["restored"]) for r in lines] == restored
    assert all(r.__dict__["expected"] == KEYS and "eta_s" in r.__dict__ for r in lines)
    # when it ended: no series left for the task
    assert _gauge(task.fq, "restored") is None and _gauge(task.fq, "expected") is None
    after = metrics.REGISTRY.get_sample_value("taskstate_restores_total", {"kind": "full"})
    assert after == before + 1


def test_a_short_restore_reports_nothing(caplog: pytest.LogCaptureFixture, redis_url: str) -> None:
    store = RedisBackend(redis_url)
    task = TaskKey("ns", "short", 0)

    async def run() -> None:
        r = await store.tasks.open(task, 0, codec="json", writer="w", durability=Durability())
        await store.tasks.commit(task, r.epoch, 0, ChangeSet.of([("a", b"1")], []), None,
                                 writer="w", durability=Durability())  # fmt: skip
        async for _ in read.restore(store.tasks, task, r.epoch, read.page_fields(0), "", False):
            assert _gauge(task.fq, "restored") is None

    with caplog.at_level(logging.INFO, logger="taskstate.sidecar.restore"):
        asyncio.run(run())
    assert not [r for r in caplog.records if r.getMessage() == "restoring"]
