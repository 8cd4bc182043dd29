"""spark_hash.py against Spark itself: `hash(col)` and where `repartition(n, col)` puts a
row, for many keys of every key type `taskstate rescale --key-type` takes.

The key's text is what a job would use as its state key (`str(value)`), read back the way
rescale reads it.
"""

from __future__ import annotations

import datetime
import math
import random
from typing import Any

import pytest

from taskstate.sidecar.spark_hash import KEY_TYPES, murmur3, partition_of

pytestmark = pytest.mark.e2e

PARTITIONS = 7


def samples(key_type: str, rng: random.Random) -> list[Any]:
    ints = {"byte": 7, "short": 15, "int": 31, "long": 63}
    if key_type in ints:
        b = ints[key_type]
        edge = [0, 1, -1, 2**b - 1, -(2**b), 2 ** (b - 1), -(2 ** (b - 1)) - 1]
        return edge + [rng.randint(-(2**b), 2**b - 1) for _ in range(300)]
    if key_type == "string":
        alphabet = "abcXYZ019 _-/#éßж中😀"
        words = ["", "a", "ab", "abc", "abcd", "abcde", "Spark", "k007", "é", "😀😀", "中文字"]
        return words + [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(400)
        ]
    if key_type == "boolean":
        return [True, False]
    if key_type in ("float", "double"):
        edge = [0.0, -0.0, 1.0, -1.5, 0.1, 1e30, -3.4e38, math.inf, -math.inf, math.nan]
        return edge + [rng.uniform(-1e6, 1e6) for _ in range(300)]
    if key_type == "date":
        base = datetime.date(1970, 1, 1)
        edge = [
            base,
            datetime.date(1, 1, 1),
            datetime.date(9999, 12, 31),
            datetime.date(1969, 12, 31),
        ]
        return edge + [
            base + datetime.timedelta(days=rng.randint(-50_000, 50_000)) for _ in range(300)
        ]
    raise AssertionError(key_type)


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_hash_and_partition_match_spark(spark: Any, key_type: str) -> None:
    from pyspark.sql import functions as F  # noqa: N812 - the usual name

    values = samples(key_type, random.Random(key_type))
    df = spark.createDataFrame([(v,) for v in values], f"v {key_type}")
    rows = (
        df.repartition(PARTITIONS, "v")
        .select("v", F.hash("v").alias("h"), F.spark_partition_id().alias("p"))
        .collect()
    )
    assert len(rows) == len(values)
    for r in rows:
        text = str(r.v)  # the job's state key
        assert murmur3(text, key_type) == r.h, f"{key_type} {r.v!r}: Spark hash {r.h}"
        assert partition_of(text, PARTITIONS, key_type) == r.p, f"{key_type} {r.v!r}"
