"""TaskState(now=...): an event time given as an aware datetime, in epoch milliseconds."""

from __future__ import annotations

import datetime as dt

import pytest

from taskstate.client import ConfigError
from taskstate.client._schema import event_time_ms

UTC = dt.UTC


@pytest.mark.parametrize(
    ("now", "ms"),
    [
        (dt.datetime(1970, 1, 1, 0, 0, 1, 1000, tzinfo=UTC), 1_001),
        # 2004-11-01: float seconds * 1000 gives 1099334334510.9999
        (dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=1_099_334_334_511),
         1_099_334_334_511),
        (dt.datetime(2023, 11, 14, 22, 13, 20, 999_999, tzinfo=UTC), 1_700_000_000_999),
        (dt.datetime(2023, 11, 15, 0, 13, 20, 1000, tzinfo=dt.timezone(dt.timedelta(hours=2))),
         1_700_000_000_001),
        (dt.datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC), -1),
        (1_700_000_000_000, 1_700_000_000_000),
        (0, 0),
    ],
)  # fmt: skip
def test_an_aware_datetime_is_its_exact_millisecond(now: object, ms: int) -> None:
    """The millisecond the datetime falls in, exactly: a key whose expiry is that
    millisecond expires in the batch, not one millisecond later."""
    assert event_time_ms("ns/c/0", now) == ms


@pytest.mark.parametrize("bad", [dt.datetime(2024, 1, 1), 1.5, True, "1700000000000"])
def test_a_naive_datetime_or_another_type_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="now="):
        event_time_ms("ns/c/0", bad)


def test_what_a_block_with_a_ttl_stores_is_the_envelope_of_each_value() -> None:
    """Scalars take the assignment's fast path (the block's envelope head + orjson); a dict
    is wrapped at commit, a float by the codec, a key with its own ttl apart: every
    stored value is exactly the envelope of its JSON, at the one now of the block."""
    import orjson

    from taskstate.client import LocalContext, TaskState
    from taskstate.proto import envelope
    from taskstate.sidecar.storage.redis.keys import data_key
    from taskstate.testing import FakeSidecar

    with FakeSidecar() as fake:
        with TaskState(LocalContext(0, batch_id=0), component="c", namespace="n",
                       sidecar=fake.target, ttl=60, version=2) as s:  # fmt: skip
            s["str"], s["int"], s["none"], s["bool"] = "é", 7, None, True
            s["float"] = 1.5  # not a fast-path scalar: the codec's path
            s["dict"] = {"a": [1]}
            s.set("own", "x", ttl=5)
            s.set("never", 1, ttl=None)
        data = {k.decode(): v for k, v in fake.client().hgetall(data_key("n", "c", 0)).items()}
        stored = {k: envelope.parse(v) for k, v in data.items()}
    values = {"str": "é", "int": 7, "none": None, "bool": True, "float": 1.5,
              "dict": {"a": [1]}, "own": "x", "never": 1}  # fmt: skip
    assert {k: orjson.loads(v[2]) for k, v in stored.items()} == values
    assert {v[1] for v in stored.values()} == {2}
    block = {stored[k][0] for k in ("str", "int", "none", "bool", "float", "dict")}
    assert len(block) == 1 and None not in block  # one now, the block's ttl
    (expires,) = block
    assert expires is not None and stored["own"][0] == expires - 55_000
    assert stored["never"][0] is None
    for k, v in data.items():  # the bytes are exactly the envelope of that JSON
        exp, ver, body = envelope.parse(v)
        assert v == envelope.wrap(body, exp, ver), k
