"""The operator CLI (`taskstate ls/show/export/import/drop/doctor`) against a real sidecar."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import (
    LocalContext,
    PartitionCountError,
    StateAheadError,
    TaskState,
    TaskStateError,
    _cache,
)
from taskstate.sidecar.storage.redis.keys import meta_key, namespace_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import snapshot
from ..waiting import eventually

pytestmark = pytest.mark.integration


def cli(
    *args: str, sidecar: SidecarProcess | None = None, check: int | None = 0, stdin: str = ""
) -> Any:
    cmd = [sys.executable, "-m", "taskstate.cli.main", *args]
    if sidecar is not None:
        cmd += ["--sidecar", sidecar.target]
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120, check=False)
    if check is not None:
        assert r.returncode == check, (r.returncode, r.stdout, r.stderr)
    return r


def ts(
    side: SidecarProcess,
    ns: str,
    batch: int,
    part: int = 0,
    comp: str = "c",
    partitions: int | None = None,
) -> TaskState:
    ctx = LocalContext(part, batch_id=batch)
    return TaskState(ctx, component=comp, namespace=ns, sidecar=side.target, partitions=partitions)


def refusal(side: SidecarProcess, ns: str, batch: int, part: int, partitions: int | None) -> str:
    """The PartitionCountError an Open under `partitions` gets (it must get one)."""
    _cache.sessions.clear()
    with (
        pytest.raises(PartitionCountError) as err,
        ts(side, ns, batch, part, partitions=partitions),
    ):
        pass
    return str(err.value)


VALUES: dict[str, Any] = {
    "plain": 1,
    "float": 0.1 + 0.2,
    "big": 2**62,
    "text": 'héllo ✓ "quoted"\n',
    "nested": {"rate": 1.5, "seen": [1, 2, {"x": None}], "ok": True},
    "empty": {},
}


def test_show_prints_exactly_what_the_next_attempt_restores(
    sidecar: SidecarProcess, namespace: str
) -> None:
    live = ts(sidecar, namespace, 0)
    with live as s:
        s.update(VALUES)
        s["gone"] = 1
    with ts(sidecar, namespace, 1) as s:
        del s["gone"]
        s["nested"]["seen"].append(3)  # changed in place: committed too
        s.commit(position={"offset": 42})
    out = json.loads(cli("show", f"{namespace}/c/0", "--json", sidecar=sidecar).stdout)
    _cache.sessions.clear()  # the next attempt runs in a new worker: it restores
    with ts(sidecar, namespace, 2) as s:
        restored = dict(s)
        assert s.info.restored
        position = s.position
    assert out["state"] == restored
    assert out["task"]["committed_batch"] == 1 and out["task"]["position"] == position
    assert out["task"]["keys"] == len(restored) == len(VALUES)

    human = cli("show", f"{namespace}/c/0", "--keys", "n*", sidecar=sidecar).stdout
    assert "committed batch: 2" in human and "1 key(s) matching 'n*'" in human
    assert '  nested = {"rate": 1.5, "seen": [1, 2, {"x": null}, 3], "ok": true}' in human


def test_show_reads_one_version_while_commits_land(sidecar: SidecarProcess, namespace: str) -> None:
    """Every commit rewrites all 20,000 keys with its batch number: one version = one value.

    The reads race the commits (HSCAN pages interleave with them); a read that saw a
    commit land is started again, so each result holds a single value.
    """
    from taskstate.client.admin import AdminClient
    from taskstate.proto import taskstate_pb2 as pb

    n = 20_000
    with ts(sidecar, namespace, 0) as s:
        s.update({f"k{i:05d}": 0 for i in range(n)})
    stop = threading.Event()
    commits = [0]

    def writer() -> None:
        b = 1
        while not stop.is_set():
            with ts(sidecar, namespace, b) as s:
                for i in range(n):
                    s[f"k{i:05d}"] = b
            commits[0] += 1
            b += 1
            # a pause of random length: a fixed one shorter than a read (a slow CI machine,
            # the writer's loop holding the GIL) left no read a quiet window, and a read
            # gave up after READ_ATTEMPTS collisions in a row
            stop.wait(random.uniform(0.05, 0.5))

    admin = AdminClient(sidecar.target, timeout_s=30)
    task = pb.TaskId(namespace=namespace, component="c", partition=0)
    t = threading.Thread(target=writer)
    t.start()
    try:
        give_up = time.monotonic() + 60  # reads until three commits raced them
        while time.monotonic() < give_up:
            data, _ = admin.read(task)
            values = set(data.values())
            assert len(data) == n and len(values) == 1, sorted(values)[:5]
            if admin.rereads >= 3 and commits[0] >= 3:
                break
    finally:
        stop.set()
        t.join()
    assert commits[0] >= 3 and admin.rereads >= 1  # the reads really raced commits
    out = json.loads(cli("show", f"{namespace}/c/0", "--json", sidecar=sidecar).stdout)
    assert set(out["state"].values()) == {out["task"]["committed_batch"]}


def test_ls_lists_namespaces_and_tasks(sidecar: SidecarProcess, namespace: str) -> None:
    for part in range(3):
        with ts(sidecar, namespace, 5, part=part) as s:
            s["k"] = part
    with ts(sidecar, namespace, 5, comp="other") as s:
        s["k"] = 1
    assert namespace in json.loads(cli("ls", "--json", sidecar=sidecar).stdout)
    tasks = json.loads(cli("ls", namespace, "--json", sidecar=sidecar).stdout)
    assert [t["task"] for t in tasks] == [f"{namespace}/c/{p}" for p in range(3)] + [
        f"{namespace}/other/0"
    ]
    assert all(t["committed_batch"] == 5 and t["keys"] == 1 for t in tasks)
    table = cli("ls", f"{namespace}/c", sidecar=sidecar).stdout.splitlines()
    assert table[0].split()[:3] == ["TASK", "BATCH", "KEYS"] and len(table) == 4
    assert cli("ls", "bad name!", sidecar=sidecar, check=2).stderr.count("namespace") >= 1


def test_export_drop_import_round_trip(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    for part in range(2):
        with ts(sidecar, namespace, 7, part=part) as s:
            s.update({**VALUES, "part": part, **{f"n{i}": i for i in range(6000)}})
            s.commit(position={"offset": 100 + part})
    before = snapshot(redis_server, namespace)
    dump = tmp_path / "export.jsonl"
    r = cli("export", namespace, "--out", str(dump), sidecar=sidecar)
    assert "2 task(s), 12014 key(s)" in r.stderr
    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    assert [x["task"] for x in lines if x["type"] == "task"] == [
        f"{namespace}/c/{p}" for p in (0, 1)
    ]

    assert "with --yes" in cli("drop", namespace, sidecar=sidecar, check=2).stderr
    assert snapshot(redis_server, namespace) == before  # refused: untouched
    assert "dropped 2 task(s)" in cli("drop", namespace, "--yes", sidecar=sidecar).stdout
    # only the namespace's record is left: a drop keeps the namespace known
    assert redis_server.client().keys(f"*{namespace}*") == [namespace_key(namespace).encode()]

    r = cli("import", str(dump), sidecar=sidecar)
    assert "imported 2 task(s), 12014 key(s)" in r.stdout
    _cache.sessions.clear()
    for part in range(2):
        with ts(sidecar, namespace, 8, part=part) as s:
            assert dict(s) == {**VALUES, "part": part, **{f"n{i}": i for i in range(6000)}}
            assert s.position == {"offset": 100 + part} and s.info.committed_batch == 7

    again = cli("import", str(dump), sidecar=sidecar, check=1)
    assert "already has state" in again.stderr and "--replace" in again.stderr
    cli("import", str(dump), "--replace", sidecar=sidecar)


def test_the_round_trip_keeps_the_partition_count_and_its_refusals(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    """export, drop, import, then the job restarted under another count: refused as before.

    Without the count in the export, the restarted job would open the imported tasks and
    count its keys in the wrong partitions, silently.
    """
    for part in range(2):
        with ts(sidecar, namespace, 5, part=part, partitions=2) as s:
            s.update({f"k{part}-{i}": i for i in range(50)})
    before = snapshot(redis_server, namespace)
    # the refusals without a round trip: another count, and a partition outside it
    other_count = refusal(sidecar, namespace, 6, 0, partitions=3)
    new_partition = refusal(sidecar, namespace, 6, 2, partitions=3)
    outside = refusal(sidecar, namespace, 6, 2, partitions=None)
    assert "split into 2 partitions" in other_count and "now declares 3" in other_count
    assert snapshot(redis_server, namespace) == before

    table = cli("ls", namespace, sidecar=sidecar).stdout.splitlines()
    assert table[0].split()[:4] == ["TASK", "BATCH", "KEYS", "PARTITIONS"]
    assert all(row.split()[3] == "2" for row in table[1:]), table
    assert "partitions:      2" in cli("show", f"{namespace}/c/1", sidecar=sidecar).stdout
    dump = tmp_path / "export.jsonl"
    cli("export", namespace, "--out", str(dump), sidecar=sidecar)
    heads = [json.loads(x) for x in dump.read_text().splitlines() if '"type":"task"' in x]
    assert [h["partitions"] for h in heads] == [2, 2]
    cli("drop", namespace, "--yes", sidecar=sidecar)
    cli("import", str(dump), sidecar=sidecar)
    imported = snapshot(redis_server, namespace)

    assert refusal(sidecar, namespace, 6, 0, partitions=3) == other_count
    assert refusal(sidecar, namespace, 6, 2, partitions=3) == new_partition
    assert refusal(sidecar, namespace, 6, 2, partitions=None) == outside
    assert snapshot(redis_server, namespace) == imported  # each refusal changed nothing
    _cache.sessions.clear()
    with ts(sidecar, namespace, 6, part=1, partitions=2) as s:
        assert dict(s) == {f"k1-{i}": i for i in range(50)}


def test_an_export_without_partition_counts_is_imported_only_with_one_given(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    for part in range(2):
        with ts(sidecar, namespace, 5, part=part, partitions=2) as s:
            s["n"] = part
    dump = tmp_path / "export.jsonl"
    cli("export", namespace, "--out", str(dump), sidecar=sidecar)
    cli("drop", namespace, "--yes", sidecar=sidecar)
    emptied = snapshot(redis_server, namespace)
    # an export as taskstate wrote it before it carried the count
    old = tmp_path / "old.jsonl"
    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    for line in lines:
        line.pop("partitions", None)
    old.write_text("".join(json.dumps(x) + "\n" for x in lines))

    r = cli("import", str(old), sidecar=sidecar, check=2)
    assert f"{old}:1: task {namespace}/c/0 has no partition count" in r.stderr
    assert "--partitions N" in r.stderr and "--partitions none" in r.stderr
    r = cli("import", str(dump), "--partitions", "3", sidecar=sidecar, check=2)
    assert "exported with partitions 2, and --partitions says 3" in r.stderr
    assert snapshot(redis_server, namespace) == emptied  # nothing imported

    cli("import", str(old), "--partitions", "2", sidecar=sidecar)
    assert "split into 2 partitions" in refusal(sidecar, namespace, 6, 0, partitions=3)

    # a component whose tasks were dropped one by one keeps its recorded count: an import
    # that brings another one is refused, and writes nothing
    for part in range(2):
        cli("drop", f"{namespace}/c/{part}", "--yes", sidecar=sidecar)
    kept = snapshot(redis_server, namespace)
    r = cli("import", str(old), "--partitions", "3", sidecar=sidecar, check=1)
    assert "split into 2 partitions, and the import brings 3 partitions" in r.stderr
    assert "Nothing was imported" in r.stderr
    assert snapshot(redis_server, namespace) == kept


def test_an_import_that_would_stop_part_way_writes_nothing(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    """Each task is imported on its own: a refusal at the second task of a file left the
    first imported, under a message saying "nothing was imported" (an SRE's review)."""
    for part in range(2):
        with ts(sidecar, namespace, 4, part=part, comp="a" if part == 0 else "b") as s:
            s["n"] = part
    dump = tmp_path / "export.jsonl"
    cli("export", namespace, "--out", str(dump), sidecar=sidecar)
    cli("drop", f"{namespace}/a", "--yes", sidecar=sidecar)  # b keeps its state
    kept = snapshot(redis_server, namespace)
    r = cli("import", str(dump), sidecar=sidecar, check=1)
    assert f"task {namespace}/b/1 already has state (batch 4, 1 keys)" in r.stderr, r.stderr
    assert "Nothing was imported" in r.stderr and f"{namespace}/a/0" not in r.stderr
    assert snapshot(redis_server, namespace) == kept  # a/0 was imported before, b refused
    # a malformed line in a later task's block refuses the file before a/0 is written, too
    only_a = [x for x in dump.read_text().splitlines() if f"{namespace}/a/0" in x]
    later = json.loads(only_a[0]) | {"task": f"{namespace}/z/0"}
    bad = {"type": "entry", "task": f"{namespace}/z/0"}  # no key
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*only_a, json.dumps(later), json.dumps(bad)]))
    r = cli("import", str(broken), sidecar=sidecar, check=2)
    assert f"{broken}:{len(only_a) + 2}: the entry has no string 'key'" in r.stderr, r.stderr
    assert snapshot(redis_server, namespace) == kept
    # standard input is read once: a refusal part-way says what was imported before it
    r = cli("import", "-", sidecar=sidecar, check=1, stdin=dump.read_text())
    assert f"{namespace}/a/0: 1 keys" in r.stderr
    assert "stopped part-way: the 1 task(s) listed above were imported" in r.stderr
    assert "already has state" in r.stderr
    cli("import", str(dump), "--replace", sidecar=sidecar)  # and --replace writes both
    _cache.sessions.clear()
    with ts(sidecar, namespace, 5, part=0, comp="a") as s:
        assert s["n"] == 0


def test_an_import_file_is_checked_as_the_sidecar_checks_it(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    """What the whole-file check must not refuse, and what it cannot see (a review)."""
    for part in range(2):
        with ts(sidecar, namespace, 4, part=part, partitions=2) as s:
            s.update({f"k{i}": i for i in range(6000)} if part == 0 else {"n": 1})
    dump = tmp_path / "export.jsonl"
    cli("export", namespace, "--out", str(dump), sidecar=sidecar)
    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    cli("drop", namespace, "--yes", sidecar=sidecar)
    # a task without a count beside one with it (a job that declared its count late):
    # it takes the component's, as the sidecar gives it, so nothing is refused
    late = {"type": "task", "task": f"{namespace}/c/1"}
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        "".join(
            json.dumps(x | {"partitions": None} if late.items() <= x.items() else x) + "\n"
            for x in lines
        )  # fmt: skip
    )
    assert "imported 2 task(s)" in cli("import", str(mixed), sidecar=sidecar).stdout
    cli("drop", namespace, "--yes", sidecar=sidecar)
    # a pipe is read once: the check is left out, the import reads it whole
    r = cli("import", "/dev/stdin", sidecar=sidecar, stdin=dump.read_text())
    assert "imported 2 task(s), 6001 key(s)" in r.stdout, (r.stdout, r.stderr)
    cli("drop", namespace, "--yes", sidecar=sidecar)
    empty = snapshot(redis_server, namespace)
    # a task twice in a file is refused whole
    twice = tmp_path / "twice.jsonl"
    twice.write_text(dump.read_text() + dump.read_text())
    r = cli("import", str(twice), sidecar=sidecar, check=1)
    assert f"task {namespace}/c/0 is in the file twice" in r.stderr
    assert snapshot(redis_server, namespace) == empty
    # from standard input, a bad line after a large task's first chunk: that task is
    # written in part, and the message says so
    head = [x for x in lines if x.get("task") == f"{namespace}/c/0"]
    bad = {"type": "entry", "task": f"{namespace}/c/0"}
    r = cli("import", "-", sidecar=sidecar, check=2,
            stdin="".join(json.dumps(x) + "\n" for x in [*head, bad]))  # fmt: skip
    assert f"{namespace}/c/0 was written in part: import it again with --replace" in r.stderr


def test_an_import_onto_a_task_a_rescale_holds_is_refused_and_keeps_the_lock(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    """import --replace deleted a held task's metadata, the rescale's lock with it (a
    review); from standard input no check comes before the sidecar's own."""
    with ts(sidecar, namespace, 4) as s:
        s["n"] = 1
    dump = tmp_path / "export.jsonl"
    cli("export", namespace, "--out", str(dump), sidecar=sidecar)
    meta = meta_key(namespace, "c", 0)
    redis_server.client().hset(meta, "rescale", "r1:4")  # as an interrupted rescale leaves it
    held = snapshot(redis_server, namespace)
    r = cli("import", "-", "--replace", sidecar=sidecar, check=1, stdin=dump.read_text())
    assert f"rescale {namespace}/c --to 4` is moving this component's keys" in r.stderr
    assert snapshot(redis_server, namespace) == held  # the lock and the state kept


def test_imported_task_refuses_a_replay_of_its_batch_rather_than_count_twice(
    sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    with ts(sidecar, namespace, 3) as s:
        s["n"] = 3
    dump = tmp_path / "e.jsonl"
    cli("export", namespace, "--out", str(dump), sidecar=sidecar)
    cli("import", str(dump), "--replace", sidecar=sidecar)
    _cache.sessions.clear()
    with pytest.raises(TaskStateError, match="older than the state"), ts(sidecar, namespace, 3):
        pass
    with pytest.raises(StateAheadError), ts(sidecar, namespace, 2):
        pass


def test_show_and_import_refuse_bad_input_clearly(
    sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    r = cli("show", f"{namespace}/c/0", sidecar=sidecar, check=1)
    assert f"task {namespace}/c/0: no state stored" in r.stderr
    assert "NAMESPACE/COMPONENT/PARTITION" in cli("show", "a/b", sidecar=sidecar, check=2).stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "task", "task": "x/c/0", "partitions": null}\nnot json\n')
    r = cli("import", str(bad), sidecar=sidecar, check=2)
    assert f"{bad}:2: not a JSON line" in r.stderr
    r = cli("adopt", f"{namespace}/c", sidecar=sidecar, check=2)
    assert "adopt takes a NAMESPACE" in r.stderr
    assert "namespace" in cli("adopt", "bad name!", sidecar=sidecar, check=2).stderr


def test_doctor_names_each_problem_and_exits_nonzero(
    redis_server: RedisServer, sidecar: SidecarProcess, tmp_path: Path
) -> None:
    # the fixture's Redis keeps nothing on disk (appendonly no, save ""): a restart would
    # lose every task's state, so doctor fails and says what to change
    r = cli("doctor", "--json", sidecar=sidecar, check=1)
    report = json.loads(r.stdout)
    assert not report["ok"] and report["topology"] == "standalone"
    assert report["servers"][0]["version"].startswith("7.")
    checks = {c["name"]: c for c in report["checks"]}
    assert not checks["persistence"]["ok"], checks
    assert "appendonly yes" in checks["persistence"]["detail"]
    assert checks["eviction"]["ok"] and checks["durability applied"]["ok"], checks

    # durability fsynced on a Redis without persistence
    r = cli("doctor", "--durability", "fsynced", sidecar=sidecar, check=1)
    assert "[FAIL] durability fsynced" in r.stdout and "appendonly" in r.stdout
    r = cli("doctor", "--durability", "replicated:1", sidecar=sidecar, check=1)
    assert "[FAIL] durability replicated:1" in r.stdout and "0" in r.stdout

    # no sidecar at all
    gone = SidecarProcess(redis_server.url, tmp_path / "nothing-here.sock")
    r = cli("doctor", sidecar=gone, check=1)
    assert "[FAIL] sidecar reachable" in r.stdout and "taskstate sidecar" in r.stdout
    assert "no sidecar answers at" in cli("health", "--live", sidecar=gone, check=1).stderr
    assert cli("health", sidecar=sidecar).stdout.strip() == "SERVING"

    # a sidecar whose Redis is down: reachable, but not serving
    dead = RedisServer(tmp_path / "dead").start()
    side = SidecarProcess(dead.url, tmp_path / "s2.sock").start()
    try:
        dead.kill()
        eventually(  # the health watcher pings Redis every second
            lambda: cli("health", sidecar=side, check=None).stdout.strip() == "NOT_SERVING",
            "the sidecar never reported NOT_SERVING after its Redis died",
            20,
            0.5,
        )
        r = cli("doctor", "--timeout", "20", sidecar=side, check=1)
        assert "[ok] sidecar reachable" in r.stdout
        assert "[FAIL] sidecar serving" in r.stdout
        # the probes: alive (liveness passes), not ready (readiness fails)
        assert cli("health", "--live", sidecar=side).stdout.strip() == "NOT_SERVING"
        assert cli("health", sidecar=side, check=1).stdout.strip() == "NOT_SERVING"
    finally:
        side.kill()
        dead.stop()


def test_doctor_passes_on_aof_with_noeviction_and_fails_on_an_evicting_policy(
    tmp_path: Path,
) -> None:
    with RedisServer(tmp_path / "aof", appendonly=True) as aof:
        side = SidecarProcess(aof.url, tmp_path / "aof.sock").start()
        try:
            r = cli("doctor", sidecar=side)
            assert "[ok] persistence: append-only file" in r.stdout, r.stdout
            assert "[ok] eviction: noeviction" in r.stdout, r.stdout
            aof.client().config_set("maxmemory-policy", "allkeys-lru")
            r = cli("doctor", sidecar=side, check=1)
            assert "[FAIL] eviction" in r.stdout and "allkeys-lru" in r.stdout, r.stdout
            assert "maxmemory-policy noeviction" in r.stdout
            aof.client().config_set("maxmemory-policy", "volatile-lru")  # no TTL: not ours
            assert "[ok] eviction: volatile-lru" in cli("doctor", sidecar=side).stdout
        finally:
            side.kill()


def test_the_sidecar_warns_at_start_about_a_redis_that_can_lose_state(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Unless told that the Redis is throwaway (--allow-volatile-redis)."""
    c = redis_server.client()
    c.config_set("maxmemory-policy", "allkeys-lfu")
    try:
        side = SidecarProcess(redis_server.url, tmp_path / "warn.sock").start()
        quiet = SidecarProcess(
            redis_server.url, tmp_path / "quiet.sock", extra=["--allow-volatile-redis"]
        ).start()
        side.kill()
        quiet.kill()
    finally:
        c.config_set("maxmemory-policy", "noeviction")
    warnings = [
        json.loads(line)
        for line in side.log_path.read_text().splitlines()
        if "redis can lose task state" in line
    ]
    assert {w["check"] for w in warnings} == {"persistence", "eviction"}, warnings
    assert all(w["level"] == "warning" for w in warnings), warnings
    # the fix, also as executor plugin users give it
    assert all("spark.taskstate.sidecar.extraArgs=--allow-volatile-redis" in w["silence_with"]
               for w in warnings), warnings  # fmt: skip
    assert "redis can lose task state" not in quiet.log_path.read_text()


def test_the_sidecar_warns_once_redis_comes_up_when_it_was_down_at_start(
    tmp_path: Path,
) -> None:
    """A DaemonSet's sidecar often starts before its Redis: the check ran only at start,
    so the warning never came (an SRE's review)."""
    redis = RedisServer(tmp_path / "later")  # not started yet: its socket does not exist
    side = SidecarProcess(redis.url, tmp_path / "early.sock").start()
    try:
        redis.start()  # no AOF, no snapshots: a Redis that can lose state
        eventually(
            lambda: "redis can lose task state" in side.log_path.read_text(),
            "the sidecar never warned about the Redis that came up after it",
            20,
            0.2,
        )
        time.sleep(2.5)  # two more health checks: the warning is not repeated
    finally:
        side.kill()
        redis.kill()
    warned = [json.loads(line) for line in side.log_path.read_text().splitlines()
              if "redis can lose task state" in line]  # fmt: skip
    assert [w["check"] for w in warned] == ["persistence"], warned


def test_operator_commands_reach_a_redis_without_a_running_sidecar(
    redis_server: RedisServer, sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    """`--redis-url`: a private sidecar for the call (a plugin job's sidecars are gone)."""
    with ts(sidecar, namespace, 0) as s:
        s["k"] = 1
    url = ["--redis-url", redis_server.url]
    listed = json.loads(cli("ls", namespace, "--json", *url).stdout)
    assert [t["task"] for t in listed] == [f"{namespace}/c/0"]
    assert '"k"' in cli("show", f"{namespace}/c/0", "--json", *url).stdout
    assert "already known" in cli("adopt", namespace, *url).stdout
    assert "[ok] redis reachable" in cli("doctor", *url, check=1).stdout  # no persistence
    r = cli("ls", *url, sidecar=sidecar, check=2)
    assert "--sidecar and --redis-url: give one or the other" in r.stderr
    r = cli("ls", "--redis-url", f"unix://{tmp_path}/nothing.sock", check=1)
    assert r.stderr.startswith(f"taskstate ls: Redis at unix://{tmp_path}/nothing.sock does not")
    assert "Traceback" not in r.stderr


def test_ls_and_show_of_a_misspelt_scope_say_where_the_state_is(
    sidecar: SidecarProcess, namespace: str
) -> None:
    """A typo in a namespace or component, a partition past the component's count."""
    for part in range(4):
        with ts(sidecar, namespace, 0, part=part, comp="cards", partitions=4) as s:
            s["n"] = part
    typo = namespace[:-1] + ("x" if namespace[-1] != "x" else "y")
    r = cli("ls", typo, sidecar=sidecar)
    assert f"namespaces with state of a similar name: {namespace}" in r.stdout
    r = cli("ls", f"{namespace}/crads", sidecar=sidecar)
    assert f"namespace {namespace} has component(s) cards" in r.stdout
    r = cli("show", f"{namespace}/cards/7", sidecar=sidecar, check=1)
    assert "7 is outside the component's partitions 0-3" in r.stderr
    r = cli("show", f"{typo}/cards/0", sidecar=sidecar, check=1)
    assert f"similar name: {namespace}" in r.stderr
