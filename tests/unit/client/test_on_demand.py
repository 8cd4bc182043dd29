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


def test_a_restore_keeps_stored_bytes_and_a_block_decodes_what_it_reads(
    fake: FakeSidecar, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restored value stays its stored bytes until a block reads it; read, it is the
    decoded value (cached so), and a change made in place to it is committed."""
    with ts(fake, namespace, 0) as s:
        s.update({"a": {"n": 1}, "b": [1, 2], "c": "text", "d": 4.5})
    _cache.sessions.clear()
    monkeypatch.setenv("TASKSTATE_LOAD", "eager")
    with ts(fake, namespace, 1) as s:
        assert s.info.restored
        held = _cache.sessions[s.task_id].data
        assert held == {"a": b'{"n":1}', "b": b"[1,2]", "c": b'"text"', "d": b"4.5"}
        s["a"]["n"] += 1  # decoded on this read, then changed in place
        assert held["a"] == {"n": 2} and held["b"] == b"[1,2]"  # untouched: still bytes
        assert s.get("c") == "text" and "b" in s and len(s) == 4
    with ts(fake, namespace, 2) as s:  # the same worker, the next batch: its cached copy
        assert not s.info.restored
        assert dict(s) == {"a": {"n": 2}, "b": [1, 2], "c": "text", "d": 4.5}
    _cache.sessions.clear()
    with ts(fake, namespace, 3) as s:  # a fresh worker: what was committed
        assert dict(s.items()) == {"a": {"n": 2}, "b": [1, 2], "c": "text", "d": 4.5}
