"""The partition count through FakeSidecar (what users' own tests run on), and Spark's
hash against values Spark documents. tests/integration/sidecar/test_rescale.py has the
rescale's faults with real servers; Spark itself checks the hash in
tests/e2e/sidecar/test_spark_hash.py."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from taskstate.client import (
    ConfigError,
    LocalContext,
    PartitionCountError,
    StateChangedError,
    TaskState,
)
from taskstate.client.admin import AdminClient
from taskstate.sidecar.spark_hash import murmur3, partition_of
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import FakeSidecar


def test_spark_hash_matches_the_values_spark_documents() -> None:
    # SELECT hash('Spark'), hash(1), pmod(hash(1), 8): 228093765, -559580957, 3
    assert murmur3("Spark") == 228093765
    assert murmur3("1", "int") == -559580957
    assert partition_of("1", 8, "int") == (-559580957) % 8 == 3
    with pytest.raises(ValueError, match="not one of|unknown key type"):
        murmur3("x", "decimal")
    with pytest.raises(ValueError):
        murmur3("3000000000", "int")


def job(fake: FakeSidecar, n: int, batch: int, events: list[tuple[str, int]], **kw: Any) -> None:
    for p in range(n):
        with TaskState(LocalContext(p, batch_id=batch), component="c", namespace="ns",
                       sidecar=fake.target, partitions=n, **kw) as s:  # fmt: skip
            for k, v in events:
                if partition_of(k, n) == p:
                    s[k] = s.get(k, 0) + v


def test_another_count_is_refused_and_a_rescale_moves_the_keys(fake: FakeSidecar) -> None:
    events = [(f"k{i}", i + 1) for i in range(40)]
    job(fake, 4, 0, events)
    with pytest.raises(PartitionCountError, match="taskstate rescale ns/c --to 8"):
        job(fake, 8, 1, events)
    with pytest.raises(ConfigError, match="partition 4 is outside the 4 partitions"):
        TaskState(LocalContext(4, batch_id=1), component="c", namespace="ns",
                  sidecar=fake.target, partitions=4)  # fmt: skip
    admin = AdminClient(fake.target, timeout_s=10.0)
    steps = list(admin.rescale("ns", "c", 8, quiet_seconds=0))
    assert steps[-1].phase == "done" and steps[-1].keys == 40 and steps[-1].batch == 0
    job(fake, 8, 1, events)
    stored: Counter[str] = Counter()
    c = fake.client()
    for p in range(8):
        for k, v in c.hgetall(data_key("ns", "c", p)).items():
            assert partition_of(k.decode(), 8) == p
            stored[k.decode()] += int(v)
    assert stored == Counter({k: 2 * v for k, v in events})
    with pytest.raises(StateChangedError, match="written 0 s ago"):
        list(admin.rescale("ns", "c", 2))


def test_partitions_must_be_a_positive_count() -> None:
    for bad in (0, -3, "shuffle", True, 2.0):
        with pytest.raises(ConfigError, match="partitions=.*pass how many partitions"):
            TaskState(LocalContext(0, batch_id=0), component="c", namespace="ns",
                      sidecar="unix:///x", partitions=bad)  # type: ignore[arg-type]  # fmt: skip


def test_edits_hold_through_a_replay(fake: FakeSidecar) -> None:
    def batch(b: int, add: int) -> int:
        with TaskState(LocalContext(0, batch_id=b), component="e", namespace="ns",
                       sidecar=fake.target) as s:  # fmt: skip
            s["k"] = s.get("k", 0) + add
            return int(s["k"])

    batch(0, 1)
    batch(1, 2)
    admin = AdminClient(fake.target, timeout_s=10.0)
    assert admin.set("ns/e/0", "k", 100).had_key == 1
    assert batch(1, 2) == 3  # the replay of batch 1 runs on the value before it
    assert batch(2, 5) == 105  # from the next batch on, the edit holds
    assert batch(3, 1) == 106  # applied once
    assert admin.erase("ns", "e", "k").tasks == 1
    assert batch(4, 0) == 0
