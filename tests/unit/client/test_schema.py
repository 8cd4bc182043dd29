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
