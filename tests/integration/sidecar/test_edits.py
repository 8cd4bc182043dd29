"""`taskstate set / del / erase` against a running job: applied at once, never undone by a
replay or by the batch in flight, and gone from the rollback record when deleted.

Real redis-server, real sidecar, the real CLI. The job adds each batch's values to
counters k0..k9 in tasks 0 and 1 of component c.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from taskstate.client import LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key, task_key
from taskstate.testing import RedisServer, SidecarProcess

from ..conftest import snapshot


def run_batch(side: SidecarProcess, ns: str, batch: int, part: int = 0) -> None:
    with TaskState(LocalContext(part, batch_id=batch), component="c", namespace=ns,
                   sidecar=side.target) as s:  # fmt: skip
        for i in range(10):
            s[f"k{i}"] = s.get(f"k{i}", 0) + batch + 1


def cli(side: SidecarProcess, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", side.target]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert not ok or done.returncode == 0, done.stderr
    return done


def value(r: RedisServer, ns: str, key: str, part: int = 0) -> object:
    raw = r.client().hget(data_key(ns, "c", part), key)
    return None if raw is None else orjson.loads(raw)


def read_in_job(side: SidecarProcess, ns: str, batch: int, key: str) -> object:
    """What the job's task sees of `key` at `batch` (and nothing written)."""
    with TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns,
                   sidecar=side.target) as s:  # fmt: skip
        return s.get(key)


def test_an_edit_is_seen_at_once_and_holds_through_a_replay(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for b in range(3):
        run_batch(sidecar, namespace, b)  # k1 = 1 + 2 + 3
    done = cli(sidecar, "set", f"{namespace}/c/0", "k1", '{"n": 100}')
    assert "set (it existed)" in done.stdout
    assert value(redis_server, namespace, "k1") == {"n": 100}
    # Spark replays batch 2 (its checkpoint did not commit it): the rollback restores k1's
    # value before batch 2, the replay adds batch 2 again; at batch 3 the edit holds again
    with TaskState(LocalContext(0, batch_id=2), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        assert s.info.rolled_back
        assert s["k1"] == 3
        for i in range(10):
            if i != 1:
                s[f"k{i}"] = s[f"k{i}"] + 3
    assert read_in_job(sidecar, namespace, 3, "k1") == {"n": 100}
    assert redis_server.client().exists(task_key(namespace, "c", 0, "edits")) == 0


def test_the_batch_in_flight_cannot_overwrite_an_edit_past_its_end(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    run_batch(sidecar, namespace, 0)
    with TaskState(LocalContext(0, batch_id=1), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        before = s["k2"]
        cli(sidecar, "set", f"{namespace}/c/0", "k2", "7")  # lands mid-batch
        s["k2"] = before + 2  # the batch's own write, from the value it read
    assert value(redis_server, namespace, "k2") == 3  # the batch wrote last...
    assert read_in_job(sidecar, namespace, 2, "k2") == 7  # ...but the next batch sees the edit
    with TaskState(LocalContext(0, batch_id=3), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s["k2"] += 1
    assert value(redis_server, namespace, "k2") == 8  # applied once, then forgotten


def test_del_and_erase_leave_no_copy_not_even_for_a_rollback(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    for b in range(2):
        run_batch(sidecar, namespace, b, part=0)
        run_batch(sidecar, namespace, b, part=1)
    done = cli(sidecar, "erase", f"{namespace}/c", "k5")
    assert "erased from 2 task(s); 2 had it" in done.stdout
    c = redis_server.client()
    for p in (0, 1):
        assert value(redis_server, namespace, "k5", p) is None
        assert c.hget(task_key(namespace, "c", p, "undo"), "k5") in (None, b"")  # no old value
    # a replay of batch 1 does not bring it back, nor does the next batch
    with TaskState(LocalContext(0, batch_id=1), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        assert s.info.rolled_back and "k5" not in s
    assert read_in_job(sidecar, namespace, 2, "k5") is None
    cli(sidecar, "del", f"{namespace}/c/1", "k6")
    assert value(redis_server, namespace, "k6", 1) is None
    assert value(redis_server, namespace, "k6", 0) == 1  # task 0, rolled back to batch 0


def test_bad_edits_are_refused_and_change_nothing(
    sidecar: SidecarProcess, redis_server: RedisServer, namespace: str
) -> None:
    run_batch(sidecar, namespace, 0)
    before = snapshot(redis_server, namespace)
    bad_json = cli(sidecar, "set", f"{namespace}/c/0", "k1", "{n: 1}", ok=False)
    assert bad_json.returncode == 2 and "is not JSON" in bad_json.stderr
    no_task = cli(sidecar, "set", f"{namespace}/c/9", "k1", "1", ok=False)
    assert no_task.returncode == 1 and f"task {namespace}/c/9: no state stored" in no_task.stderr
    not_a_number = cli(sidecar, "set", f"{namespace}/c/0", "k1", "NaN", ok=False)
    assert not_a_number.returncode == 2
    assert snapshot(redis_server, namespace) == before


@pytest.mark.parametrize("command", ["set", "del", "erase", "rescale"])
def test_edits_and_rescale_need_a_token_granted_the_namespace(
    redis_server: RedisServer, namespace: str, tmp_path: Path, command: str
) -> None:
    tmp = tmp_path
    tokens = tmp / "tokens.json"
    tokens.write_text(orjson.dumps({"tokens": [
        {"name": "other", "token": "o" * 24, "namespaces": ["other"]},
        {"name": "job", "token": "j" * 24, "namespaces": [namespace]},
    ]}).decode())  # fmt: skip
    (tmp / "other").write_text("o" * 24)
    args = {
        "set": ["set", f"{namespace}/c/0", "k1", "1"],
        "del": ["del", f"{namespace}/c/0", "k1"],
        "erase": ["erase", f"{namespace}/c", "k1"],
        "rescale": ["rescale", f"{namespace}/c", "--to", "2"],
    }[command]
    extra = ["--tokens-file", str(tokens)]
    with SidecarProcess(redis_server.url, tmp / "s.sock", extra=extra) as side:
        cmd = [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", side.target,
               "--token-file", str(tmp / "other")]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    verb = "rescale" if command == "rescale" else "edit"
    assert done.returncode == 1 and f"may not {verb} it" in done.stderr, done.stderr
