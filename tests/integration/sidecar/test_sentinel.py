"""Sentinel: SIGKILL the master during a stream of `replicated:1` commits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import SidecarProcess
from taskstate.testing.topologies import RedisSentinelProcs

from ..waiting import eventually
from ..workload import Outcome, assert_faults_struck, decode_hash, expected, run_batch

pytestmark = pytest.mark.integration


def test_master_killed_no_acknowledged_commit_lost_sidecar_follows(
    tmp_path: Path, namespace: str
) -> None:
    topo = RedisSentinelProcs(tmp_path / "redis").start()
    side = SidecarProcess(topo.url, tmp_path / "s.sock", extra=["--redis-deadline", "8"]).start()
    pid = side.proc.pid if side.proc else None
    try:
        old_master = topo.master
        outcome = Outcome()
        events: list[str] = []

        def fault() -> None:
            time.sleep(1.0)
            old_master.kill()  # SIGKILL the master mid-stream
            events.append("killed")
            eventually(
                lambda: topo.current_master() is topo.replica, "sentinel did not fail over", 60, 0.2
            )
            events.append("failed over")
            time.sleep(1.0)
            old_master.restart()  # comes back; the sentinel makes it a replica
            events.append("old master back")

        t = threading.Thread(target=fault)
        t.start()
        batches = 0
        while t.is_alive() or batches < 30:
            for p in range(3):
                run_batch(side.target, namespace, p, batches, durability="replicated:1",
                          outcome=outcome)  # fmt: skip
            batches += 1
        t.join()
        assert events == ["killed", "failed over", "old master back"]
        assert topo.current_master() is topo.replica
        # the same sidecar process served before and after the failover
        assert side.proc is not None and side.proc.pid == pid and side.proc.poll() is None
        new_master = topo.replica.client()
        for p in range(3):
            key = data_key(namespace, "c", p)
            assert decode_hash(new_master.hgetall(key)) == expected(batches)
        # the failover really struck requests in flight or queued
        assert_faults_struck("sentinel", outcome, side.log_path.read_text())
    finally:
        side.kill()
        topo.stop()
