"""A large commit frees the Lua garbage it made (commit.lua, prelude.lua's free_lua_heap).

Its change set unpacked into Lua strings is garbage once the script ends; left to Lua's
incremental collector, it would be paid for by the scripts that run next, of every task
on the server (the hand-over figure's alternating batches after a 400,000-key seed).
"""

from __future__ import annotations

import pytest

from taskstate.client import LocalContext, TaskState
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration

LUA_HEAP_KB = 8192  # prelude.lua


def test_a_large_commit_leaves_no_lua_garbage(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str
) -> None:
    c = redis_server.client()
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s.update({f"k{i}": i for i in range(150_000)})  # about 20 MB of Lua strings unpacked
    # what is left: the script's ARGV (the packed change set and log entry, about 4 MB)
    assert c.info("memory")["used_memory_lua"] < LUA_HEAP_KB * 1024
    with TaskState(LocalContext(0, batch_id=1), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        assert len(s) == 150_000 and s["k149999"] == 149_999
