"""Redis Cluster (3 masters, 3 replicas): 1,000 tasks, a slot migration while commits run,
a master SIGKILLed and failed over; every task's state is exactly right."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from taskstate.sidecar.storage.redis.keys import data_key, meta_key
from taskstate.testing import SidecarProcess
from taskstate.testing.topologies import RedisClusterProcs

from ..waiting import eventually
from ..workload import Outcome, assert_faults_struck, decode_hash, expected, run_batch

pytestmark = pytest.mark.integration

TASKS = 1000
DURABILITY = "replicated:1"  # a SIGKILLed master must not take acknowledged commits along


def run_round(target: str, namespace: str, batch: int, outcome: Outcome) -> tuple[float, float]:
    """Batch `batch` of every task, four tasks at a time; returns (start, end)."""
    start = time.monotonic()
    chunks = [range(i, TASKS, 4) for i in range(4)]

    def work(parts: range) -> None:
        for p in parts:
            run_batch(target, namespace, p, batch, durability=DURABILITY, outcome=outcome)

    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(work, c) for c in chunks]:
            f.result()
    return start, time.monotonic()


def test_thousand_tasks_through_slot_migration_and_master_failover(
    tmp_path: Path, namespace: str
) -> None:
    topo = RedisClusterProcs(tmp_path / "cluster").start()
    side = SidecarProcess(topo.url, tmp_path / "s.sock", extra=["--redis-deadline", "8"]).start()
    try:
        outcome = Outcome()
        rc = topo.client()
        slot_of = {p: rc.keyslot("{" + f"{namespace}/c/{p}" + "}") for p in range(TASKS)}
        assert len(set(slot_of.values())) > 900  # one slot per task, spread over the cluster
        for batch in range(2):
            run_round(side.target, namespace, batch, outcome)

        # -- migrate 25 slots holding tasks from the first master to the second, key by key,
        #    while two rounds of commits run
        a, b = topo.nodes[0], topo.nodes[1]
        moving = sorted({s for s in slot_of.values() if topo.owner(s) is a})[:25]
        migrated: list[int] = []
        window: list[float] = []

        def migrate() -> None:
            window.append(time.monotonic())
            for s in moving:
                migrated.append(topo.migrate_slot(s, b, per_key_delay_s=0.03))
            window.append(time.monotonic())

        in_slots = sum(a.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", s) for s in moving)
        assert in_slots >= 3 * 25  # data, meta and undo of at least one task per slot
        mover = threading.Thread(target=migrate)
        mover.start()
        rounds = [run_round(side.target, namespace, batch, outcome) for batch in (2, 3)]
        mover.join()
        assert sum(migrated) == in_slots  # every key moved (a slot may hold two tasks)
        assert all(topo.owner(s) is b for s in moving)
        assert window[0] < rounds[-1][1] and window[1] > rounds[0][0], "no overlap"

        # -- SIGKILL the second master (it now holds the migrated slots too) mid-round
        replica = topo.replica_of(b)
        events: list[str] = []

        def failover() -> None:
            time.sleep(0.5)
            b.kill()
            events.append("killed")
            eventually(
                lambda: topo.owner(moving[0]) is replica, "the replica was not promoted", 60, 0.2
            )
            events.append("promoted")
            b.restart()  # rejoins as a replica of the promoted node
            topo.wait_healthy()
            events.append("healthy")

        f = threading.Thread(target=failover)
        f.start()
        run_round(side.target, namespace, 4, outcome)
        f.join()
        assert events == ["killed", "promoted", "healthy"]
        run_round(side.target, namespace, 5, outcome)

        # -- every task's state is exactly right (read straight from the cluster)
        rc = topo.client()
        wrong = {}
        for p in range(TASKS):
            state = decode_hash(rc.hgetall(data_key(namespace, "c", p)))
            batch = rc.hget(meta_key(namespace, "c", p), "batch")
            if state != expected(6) or batch != b"5":
                wrong[p] = (state, batch)
        assert wrong == {}, f"{len(wrong)} tasks wrong, e.g. {next(iter(wrong.items()))}"
        assert_faults_struck("cluster", outcome, side.log_path.read_text())

        # -- the operator commands on a cluster: namespaces from every primary, a task's
        # state read from the slot's owner, the doctor seeing all three primaries
        from taskstate.client.admin import AdminClient

        admin = AdminClient(side.target, timeout_s=30)
        assert namespace in admin.namespaces()
        assert len(admin.tasks(namespace)) == TASKS
        data, _ = admin.read(f"{namespace}/c/7")
        assert decode_hash({k.encode(): v for k, v in data.items()}) == expected(6)
        report = admin.doctor()
        assert report.topology == "cluster" and len(report.servers) == 3
        checks = {c.name: c for c in report.checks}
        assert all(c.ok for name, c in checks.items() if name != "persistence"), checks
        # the test cluster keeps nothing on disk: doctor names each of its primaries
        assert not checks["persistence"].ok
        assert checks["persistence"].detail.count("no persistence") == 1
        assert all(f"{s.address}" in checks["persistence"].detail for s in report.servers)
    finally:
        side.kill()
        topo.stop()
