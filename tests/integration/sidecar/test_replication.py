"""`replicated:N` and `replicated:N,fsynced` with a real replica that goes away and comes
back: a short acknowledgement is a DurabilityError, and the retried batch then succeeds,
counted once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from taskstate.client import DurabilityError, LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import SidecarProcess
from taskstate.testing.topologies import RedisNode

from ..waiting import eventually
from ..workload import Outcome, decode_hash, expected, run_batch

pytestmark = pytest.mark.integration


@contextmanager
def _replicated(tmp_path: Path) -> Iterator[tuple[RedisNode, RedisNode, SidecarProcess]]:
    """A master with AOF, its replica (up), and a sidecar on the master."""
    aof = ["--appendonly", "yes", "--appendfsync", "always"]
    master = RedisNode(tmp_path / "master", args=aof).start()
    replica = RedisNode(
        tmp_path / "replica", args=[*aof, "--replicaof", "127.0.0.1", str(master.port)]
    ).start()
    side = SidecarProcess(
        f"redis://127.0.0.1:{master.port}/0",
        tmp_path / "s.sock",
        extra=["--redis-deadline", "5", "--durability-timeout-ms", "500"],
    ).start()
    try:
        _wait_replica_up(master, replica)
        yield master, replica, side
    finally:
        side.kill()
        replica.kill()
        master.kill()


def _wait_replica_up(master: RedisNode, replica: RedisNode) -> None:
    eventually(
        lambda: (
            master.info("replication").get("connected_slaves") == 1
            and replica.alive
            and replica.info("replication").get("master_link_status") == "up"
        ),
        "the replica's link to its master did not come up",
        20,
        0.1,
    )


def test_short_acknowledgement_then_retry_succeeds_once_replica_is_back(
    tmp_path: Path, namespace: str
) -> None:
    level = "replicated:1,fsynced"
    with _replicated(tmp_path) as (master, replica, side):
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
        _wait_replica_up(master, replica)
        outcome = Outcome()
        run_batch(side.target, namespace, 0, 1, durability=level, outcome=outcome)  # a retry
        c = master.client()
        assert decode_hash(c.hgetall(data_key(namespace, "c", 0))) == expected(2)  # counted once
        # every retry of batch 1 rolled the unacknowledged attempt back first
        assert int(c.hget(meta_key(namespace, "c", 0), "rollbacks") or 0) == outcome.attempts
        # and the replica has it too
        time.sleep(0.2)
        assert decode_hash(replica.client().hgetall(data_key(namespace, "c", 0))) == expected(2)


def test_a_one_call_block_waits_for_its_replica_as_a_commit_does(
    tmp_path: Path, namespace: str
) -> None:
    """open_at="exit": OpenCommit's script, then WAIT on the same connection."""
    level = "replicated:1"

    def block(batch: int, value: int) -> TaskState:
        ctx = LocalContext(0, batch_id=batch)
        with TaskState(ctx, component="c", namespace=namespace, sidecar=side.target,
                       durability=level, open_at="exit") as s:  # fmt: skip
            s["k"] = value
        return s

    with _replicated(tmp_path) as (master, replica, side):
        block(0, 0)  # opens at its enter: the worker learns that the sidecar serves the call
        assert block(1, 1).info.with_commit
        time.sleep(0.2)
        assert replica.client().hget(data_key(namespace, "c", 0), "k") == b"1"
        replica.kill()
        while master.info("replication").get("connected_slaves") != 0:
            time.sleep(0.1)
        with pytest.raises(DurabilityError, match="0 replica"):
            block(2, 2)
        # applied, not acknowledged: as a Commit's, the task fails and its retry rolls back
        assert master.client().hget(meta_key(namespace, "c", 0), "batch") == b"2"
