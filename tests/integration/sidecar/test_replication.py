"""`replicated:N` and `replicated:N,fsynced` with a real replica that goes away and comes
back: a short acknowledgement is a DurabilityError, and the retried batch then succeeds,
counted once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taskstate.client import DurabilityError
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import SidecarProcess
from taskstate.testing.topologies import RedisNode

from ..workload import Outcome, decode_hash, expected, run_batch

pytestmark = pytest.mark.integration


def test_short_acknowledgement_then_retry_succeeds_once_replica_is_back(
    tmp_path: Path, namespace: str
) -> None:
    aof = ["--appendonly", "yes", "--appendfsync", "always"]
    master = RedisNode(tmp_path / "master", args=aof).start()
    replica = RedisNode(
        tmp_path / "replica", args=[*aof, "--replicaof", "127.0.0.1", str(master.port)]
    ).start()

    def replica_up() -> bool:
        if master.info("replication").get("connected_slaves") != 1:
            return False
        return replica.alive and replica.info("replication").get("master_link_status") == "up"

    side = SidecarProcess(
        f"redis://127.0.0.1:{master.port}/0",
        tmp_path / "s.sock",
        extra=["--redis-deadline", "5", "--durability-timeout-ms", "500"],
    ).start()
    level = "replicated:1,fsynced"
    try:
        deadline = time.monotonic() + 20
        while not replica_up():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        run_batch(side.target, namespace, 0, 0, durability=level)

        replica.kill()
        while master.info("replication").get("connected_slaves") != 0:
            time.sleep(0.1)
        with pytest.raises(DurabilityError) as info:
            run_batch(side.target, namespace, 0, 1, durability=level, give_up_s=0)
        msg = str(info.value)
        assert f"{namespace}/c/0" in msg and level in msg and "0 replica" in msg, msg
        # applied but not acknowledged: Redis has batch 1, the task failed anyway
        assert master.client().hget(meta_key(namespace, "c", 0), "batch") == b"1"

        replica.restart()
        deadline = time.monotonic() + 20
        while not replica_up():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        outcome = Outcome()
        run_batch(side.target, namespace, 0, 1, durability=level, outcome=outcome)  # a retry
        c = master.client()
        assert decode_hash(c.hgetall(data_key(namespace, "c", 0))) == expected(2)  # counted once
        # every retry of batch 1 rolled the unacknowledged attempt back first
        assert int(c.hget(meta_key(namespace, "c", 0), "rollbacks") or 0) == outcome.attempts
        # and the replica has it too
        time.sleep(0.2)
        assert decode_hash(replica.client().hgetall(data_key(namespace, "c", 0))) == expected(2)
    finally:
        side.kill()
        replica.kill()
        master.kill()
