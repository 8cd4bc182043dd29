"""The test helpers' processes: `with X().start() as x:` starts one process, not two.

Before, `__enter__` started the process again and the first one, in a session of its
own, ran on after the test, out of its reach (found leaking from a benchmark script).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped) is not running
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _running_with(text: str) -> list[int]:
    """The live processes whose command line mentions `text`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and _alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def test_started_then_entered_is_one_process_each_and_gone_after(tmp_path: Path) -> None:
    redis_dir, side_sock = str(tmp_path / "r"), str(tmp_path / "s.sock")
    with RedisServer(redis_dir).start() as redis:
        assert redis.proc is not None
        assert _running_with(redis_dir) == [redis.proc.pid]  # one redis-server, the held one
        with SidecarProcess(redis.url, side_sock).start() as side:
            assert side.proc is not None
            assert _running_with(side_sock) == [side.proc.pid]
        assert _running_with(side_sock) == []
    assert _running_with(redis_dir) == []


def test_starting_a_running_process_again_is_refused_and_it_keeps_running(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r") as redis:
        pid = redis.proc.pid if redis.proc else -1
        with pytest.raises(RuntimeError, match="already running .*kill\\(\\) it"):
            redis.start()
        assert redis.ping() and redis.proc is not None and redis.proc.pid == pid
        with SidecarProcess(redis.url, tmp_path / "s.sock") as side:
            with pytest.raises(RuntimeError, match="already running"):
                side.start()
            assert side.proc is not None and side.proc.poll() is None
        # stopped, it starts again (the data directory kept)
        redis.kill()
        redis.start()
        assert redis.ping()


def test_a_topology_node_started_twice_is_refused_and_restarts_after_kill(tmp_path: Path) -> None:
    from taskstate.testing.topologies import RedisNode

    node = RedisNode(tmp_path / "n").start()
    try:
        pid = node.proc.pid if node.proc else -1
        with pytest.raises(RuntimeError, match="already running; kill\\(\\) it first"):
            node.start()
        # redis-server names itself by its address in its process title
        assert _running_with(f"redis-server {node.address}") == [pid]
        node.kill()
        node.restart()
        assert node.ping()
    finally:
        node.kill()
    assert _running_with(f"redis-server {node.address}") == []
