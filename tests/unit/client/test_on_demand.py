"""On-demand reads against the in-memory sidecar: the keys a frame brings, as pandas has them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.testing import FakeSidecar


def ts(fake: FakeSidecar, ns: str, batch: int) -> TaskState:
    return TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns,
                     sidecar=fake.target)  # fmt: skip


@pytest.fixture(autouse=True)
def cold_worker() -> None:
    _cache.sessions.clear()


def test_a_frames_keys_are_read_in_one_batch_whatever_their_str_type(
    fake: FakeSidecar, namespace: str
) -> None:
    with ts(fake, namespace, 0) as s:
        s.update({"a": 1, "b": 2, "c": 3})
    _cache.sessions.clear()
    frame = pd.DataFrame({"key": ["a", "b", "a", "zz"]})
    with ts(fake, namespace, 1) as s:
        assert s.info.on_demand
        s.prefetch(frame["key"])  # a Series of str
        s.prefetch(np.array(["c"]))  # numpy's str_
        held = _cache.sessions[s.task_id]
        assert held.data == {"a": 1, "b": 2, "c": 3} and held.absent == {"zz"}
        assert s.get(np.str_("c")) == 3 and np.str_("zz") not in s
        s["zz"] = 26  # written: no longer known absent
        assert held.absent == set() and s["zz"] == 26
        assert s.get_many(["a", "a", "nope", 7]) == {"a": 1}  # 7 is no key
    with ts(fake, namespace, 2) as s:
        assert dict(s) == {"a": 1, "b": 2, "c": 3, "zz": 26}
