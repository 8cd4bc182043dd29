"""placement.partitions_of (numpy) gives exactly what spark_hash.partition_of gives, key by key.

partition_of is checked against Spark's own hash() in tests/e2e/sidecar/test_spark_hash.py.
"""

from __future__ import annotations

import random

import pytest

from taskstate.sidecar.placement import partitions_of
from taskstate.sidecar.spark_hash import partition_of


def test_string_keys_of_every_length_and_alphabet() -> None:
    rnd = random.Random(7)
    alphabet = "abcXYZ019-_ é✓漢😀"
    keys = [""] + [
        "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 41))) for _ in range(5000)
    ]
    keys += [f"user-{i}" for i in range(3000)]
    for n in (1, 2, 3, 7, 200, 65536):
        assert partitions_of(keys, n) == [partition_of(k, n) for k in keys], n


@pytest.mark.parametrize(
    ("key_type", "lo", "hi"),
    [("int", -(2**31), 2**31 - 1), ("long", -(2**63), 2**63 - 1), ("short", -(2**15), 2**15 - 1),
     ("byte", -128, 127)],
)  # fmt: skip
def test_whole_number_keys_with_their_limits(key_type: str, lo: int, hi: int) -> None:
    rnd = random.Random(key_type)
    values = [lo, hi, 0, -1, 1] + [rnd.randint(lo, hi) for _ in range(4000)]
    keys = [str(v) for v in values]
    for n in (3, 8, 1000):
        assert partitions_of(keys, n, key_type) == [partition_of(k, n, key_type) for k in keys]


def test_other_types_and_unreadable_keys_go_one_by_one() -> None:
    keys = ["1.5", "-0.0", "nan", "2.5e10"]
    assert partitions_of(keys, 5, "double") == [partition_of(k, 5, "double") for k in keys]
    assert partitions_of(["2024-02-29"], 3, "date") == [partition_of("2024-02-29", 3, "date")]
    with pytest.raises(ValueError, match="outside the int range"):
        partitions_of(["1", str(2**31)], 4, "int")
    with pytest.raises(ValueError):
        partitions_of(["1", "x"], 4, "long")
    assert partitions_of([], 4) == []
