"""A stored field taskstate did not write is a clear error naming the task and the key."""

from __future__ import annotations

import pytest

from taskstate.client import CodecError, LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("load", ["eager", "on-demand"])
@pytest.mark.parametrize(
    ("raw", "says"),
    [(b"\xff\xfe not utf-8", "not UTF-8"), (b"{not json", "not valid JSON")],
)
def test_foreign_bytes_in_the_state_name_the_key(
    redis_server: RedisServer,
    sidecar: SidecarProcess,
    namespace: str,
    raw: bytes,
    says: str,
    load: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with TaskState(LocalContext(0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s.update({f"k{i}": i for i in range(50)})
    key = data_key(namespace, "c", 0)
    redis_server.client().hset(key, "intruder", raw)
    from taskstate.client import _cache

    _cache.sessions.clear()
    monkeypatch.setenv("TASKSTATE_LOAD", load)
    state = TaskState(LocalContext(0), component="c", namespace=namespace,
                      sidecar=sidecar.target)  # fmt: skip
    with pytest.raises(CodecError, match=says) as info:
        state.__enter__()  # eager: the restore meets it
        state.get_many(["k1", "intruder"])  # on demand: the read that meets it
    assert "intruder" in str(info.value) and f"{namespace}/c/0" in str(info.value)
