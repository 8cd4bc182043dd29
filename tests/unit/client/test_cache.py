"""The per-process cache: bounded in bytes (TASKSTATE_CACHE_BYTES), least recently used first."""

from __future__ import annotations

import logging

import pytest

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.testing import FakeSidecar


def block(fake: FakeSidecar, ns: str, part: int, batch: int, n: int = 0) -> TaskState:
    """One block of task `part` at `batch`, writing `n` keys; returns it (closed)."""
    s = TaskState(LocalContext(part, batch_id=batch), component="c", namespace=ns,
                  sidecar=fake.target)  # fmt: skip
    with s:
        s.update({f"key-{i:06d}": {"n": i, "part": part} for i in range(n)})
    return s


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    _cache.sessions.clear()
    _cache._warned.clear()
    # whole states come back on every cold Open, so "restored" shows what was evicted
    # (the last test reads on demand)
    monkeypatch.setenv("TASKSTATE_LOAD", "eager")


def test_the_estimate_is_per_key_and_per_encoded_byte(fake: FakeSidecar, namespace: str) -> None:
    block(fake, namespace, 0, 0, n=1000)
    s = _cache.sessions[f"{namespace}/c/0"]
    encoded = len("key-000000") + len('{"n":999,"part":0}')
    # first sizes from the commit: within a few bytes a key of the real encodings
    assert abs(s.entry_bytes - encoded) <= 2
    assert _cache.size_of(s) == pytest.approx(
        1000 * (_cache.ENTRY_BYTES + _cache.VALUE_FACTOR * s.entry_bytes)
    )
    assert _cache.cached_bytes() == _cache.size_of(s)


def test_past_the_bound_the_least_recently_used_states_are_dropped(
    fake: FakeSidecar, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for part in range(3):
        block(fake, namespace, part, 0, n=2000)
    one = _cache.size_of(_cache.sessions[f"{namespace}/c/0"])
    assert _cache.cached_bytes() == pytest.approx(3 * one, rel=0.01)  # all three fit today

    # room for two tasks' states: the next block evicts the oldest state (task 0's)
    monkeypatch.setenv("TASKSTATE_CACHE_BYTES", str(int(2.5 * one)))
    block(fake, namespace, 2, 1)
    assert [_cache.sessions[f"{namespace}/c/{p}"].data is None for p in range(3)] == [
        True,
        False,
        False,
    ]
    assert _cache.cached_bytes() <= 2.5 * one
    # the claim stayed; the state comes back whole from the sidecar, exactly
    again = block(fake, namespace, 0, 1)
    assert again.info.restored and again.info.size == 2000
    # now task 1 is the least recently used one
    assert _cache.sessions[f"{namespace}/c/1"].data is None
    kept = block(fake, namespace, 2, 2)
    assert not kept.info.restored  # task 2 never left


def test_a_state_larger_than_the_bound_is_not_kept_and_the_log_says_so(
    fake: FakeSidecar,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("TASKSTATE_CACHE_BYTES", "100000")
    block(fake, namespace, 0, 0, n=3000)
    with caplog.at_level(logging.WARNING, logger="taskstate.client"):
        block(fake, namespace, 0, 1)  # its state is known to be large when it is entered
        block(fake, namespace, 1, 0)  # another task: the large one is evicted
        block(fake, namespace, 0, 2)
    warnings = [r.getMessage() for r in caplog.records if "TASKSTATE_CACHE_BYTES" in r.getMessage()]
    assert len(warnings) == 1 and f"task {namespace}/c/0" in warnings[0]
    assert _cache.sessions[f"{namespace}/c/0"].data is not None  # while in use: kept
    block(fake, namespace, 1, 1)
    assert _cache.sessions[f"{namespace}/c/0"].data is None


def test_a_bound_of_zero_caches_nothing_between_blocks(
    fake: FakeSidecar, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKSTATE_CACHE_BYTES", "0")
    block(fake, namespace, 0, 0, n=10)
    block(fake, namespace, 1, 0, n=10)
    assert _cache.sessions[f"{namespace}/c/0"].data is None
    assert block(fake, namespace, 0, 1).info.restored


def test_a_copy_read_on_demand_costs_what_it_holds(
    fake: FakeSidecar, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKSTATE_LOAD", "on-demand")
    block(fake, namespace, 0, 0, n=2000)
    whole = _cache.size_of(_cache.sessions[f"{namespace}/c/0"])
    _cache.sessions.clear()  # a new worker: it holds nothing of the task
    s = TaskState(LocalContext(0, batch_id=1), component="c", namespace=namespace,
                  sidecar=fake.target)  # fmt: skip
    with s:
        assert s.info.on_demand and not s.info.restored
        got = s.get_many([f"key-{i:06d}" for i in range(0, 2000, 10)] + ["nope"])
        assert len(got) == 200 and got["key-000010"] == {"n": 10, "part": 0}
    held = _cache.sessions[f"{namespace}/c/0"]
    assert held.absent == {"nope"} and not held.complete
    assert _cache.size_of(held) == pytest.approx(whole / 10, rel=0.05)


def test_a_finished_block_is_freed_without_the_cycle_collector(
    fake: FakeSidecar, namespace: str
) -> None:
    """A reference cycle through the TaskState would keep its state (a whole dict) alive
    until Python's cycle collector ran: an executor's memory would then follow the number
    of blocks, not the bound."""
    import gc
    import weakref

    gc.disable()
    try:
        s = block(fake, namespace, 0, 0, n=10)
        ref = weakref.ref(s)
        del s
        assert ref() is None
    finally:
        gc.enable()
