"""`taskstate demo` end to end: summary, chart, and Ctrl-C cleanup."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import cast

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngImageFile

from taskstate.demo.trending import COMPONENT
from taskstate.sidecar.storage.redis.keys import meta_key, namespace_pattern
from taskstate.testing import RedisServer

pytestmark = pytest.mark.e2e

SMALL = ["--batches", "4", "--tweets-per-batch", "300", "--partitions", "2"]


def _demo(args: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.Popen(
        [sys.executable, "-m", "taskstate.cli.main", "demo", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # Ctrl-C as in a terminal: a suite run as a background job (`bin/test &`) inherits
        # SIGINT ignored, and a Python started with it ignored never raises KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.compat
def test_demo_summary_and_chart(
    spark_ready: None, tmp_path: Path, redis_server: RedisServer
) -> None:
    # on "the user's" Redis: the demo says at the end which namespaces it left there
    proc = _demo([*SMALL, "--faults", "all", "--out", str(tmp_path),
                  "--redis-url", redis_server.url])  # fmt: skip
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    left = out.split("the state stays in", 1)[1]
    names = re.findall(r"demo-[0-9a-f]{8}-(?:golden|taskstate)", left.split(". Remove", 1)[0])
    assert len(names) == 2 and "taskstate drop NS --yes --redis-url URL" in left
    for ns in names:  # they are there, for `taskstate ls/show --redis-url`
        assert redis_server.client().keys(namespace_pattern(ns)), ns
        # and each task declared the job's partition count, as a job should (README)
        for part in (0, 1):
            assert redis_server.client().hget(meta_key(ns, COMPONENT, part), "partitions") == b"2"
    summary = json.loads((tmp_path / "summary.json").read_text())
    runs = {r["name"]: r for r in summary["runs"]}
    assert set(runs) == {"golden", "taskstate", "plain-dict"}
    assert runs["taskstate"]["identical"] and runs["taskstate"]["largest_ewma_error"] == 0
    assert runs["taskstate"]["rows"] == runs["golden"]["rows"] > 0
    assert not runs["plain-dict"]["identical"] and runs["plain-dict"]["largest_ewma_error"] > 0
    assert len(summary["top10_golden"]) == 10
    # without --expire-after every hashtag seen stays: the state only grows
    live = summary["state"]["live_tags_per_batch"]
    assert summary["expire_after"] is None and summary["state"]["bounded"] is None
    assert runs["golden"]["keys_per_batch"] == runs["taskstate"]["keys_per_batch"] == live
    assert live == sorted(live) and live[-1] == summary["state"]["tags_seen"]
    assert runs["golden"]["keys_in_redis"] == runs["taskstate"]["keys_in_redis"] == live[-1]
    assert summary["state"]["gone_by_the_end"] == []
    assert "hashtags held in the state after each batch (no --expire-after" in out
    for run in ("taskstate", "plain-dict"):  # every fault struck in both faulted runs
        faults = tmp_path / run / "faults"
        assert {"worker-killed", "sidecar-killed", "paused"} <= {p.name for p in faults.iterdir()}
    assert "identical to golden" in out and "top 10 hashtags" in out
    # progress was shown (polled, so a count may be skipped), faults announced
    assert re.search(r"(golden|taskstate|plain-dict): [1-3]/4 batches", out)
    assert "fault: the Python worker was SIGKILLed" in out and "fault: the sidecar" in out
    assert "stopping the query hard" in out
    # the PNG is valid and holds the three runs
    with Image.open(tmp_path / "trending.png") as png:
        assert png.format == "PNG" and png.width > 400 and png.height > 600
        described = json.loads(cast(PngImageFile, png).text["Description"])
        assert described["runs"] == ["golden", "taskstate", "plain-dict"]
        struck = summary["fault_batches"]  # marked where they struck, in the faulted runs
        assert described["faults"] == {"golden": {}, "taskstate": struck, "plain-dict": struck}
        assert set(struck) == {"worker", "sidecar", "restart"}
        rgb = png.convert("RGB")
        thirds = [
            rgb.crop((0, i * png.height // 3, png.width, (i + 1) * png.height // 3))
            for i in range(3)
        ]
        for panel in thirds:  # each panel has its plotted lines (many colours)
            assert len(panel.getcolors(maxcolors=1 << 16) or []) > 20


def test_demo_expire_after_stays_identical_and_bounded(spark_ready: None, tmp_path: Path) -> None:
    """--expire-after 3: TaskState's event-time ttl under every fault."""
    proc = _demo([*SMALL, "--faults", "all", "--expire-after", "3", "--out", str(tmp_path)])
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    runs = {r["name"]: r for r in summary["runs"]}
    assert summary["expire_after"] == 3
    assert runs["taskstate"]["identical"] and runs["taskstate"]["largest_ewma_error"] == 0
    for run in ("taskstate", "plain-dict"):  # every fault struck in both faulted runs
        faults = tmp_path / run / "faults"
        assert {"worker-killed", "sidecar-killed", "paused"} <= {p.name for p in faults.iterdir()}
    # the state holds exactly the hashtags seen in the batch or the 3 buckets before it
    # (counted from the stream, not from a run), and Redis no more after the last batch
    state = summary["state"]
    live = state["live_tags_per_batch"]
    assert state["bounded"] is True and len(live) == 4
    assert runs["golden"]["keys_per_batch"] == runs["taskstate"]["keys_per_batch"] == live
    assert runs["golden"]["keys_in_redis"] == runs["taskstate"]["keys_in_redis"] == live[-1]
    assert all(n <= m for n, m in zip(runs["plain-dict"]["keys_per_batch"], live, strict=True))
    assert runs["plain-dict"]["keys_in_redis"] is None
    assert max(live) < state["tags_seen"]  # hashtags did expire: less than all ever seen
    assert state["gone_by_the_end"] and "expired and not seen again (golden): #" in out
    assert "state bounded: yes" in out and "seen in it or 3 buckets before" in out
    assert "keys in Redis after the last batch: golden " in out


def _descendants(root: int) -> dict[int, bytes]:
    children: dict[int, list[int]] = {}
    cmd: dict[int, bytes] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            cmd[int(p)] = Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(p))
    out, todo = {}, [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out[c] = cmd.get(c, b"")
            todo.append(c)
    return out


def test_ctrl_c_leaves_nothing_behind(spark_ready: None, tmp_path: Path) -> None:
    proc = _demo([*SMALL, "--batches", "8", "--out", str(tmp_path)])
    assert proc.stdout is not None
    seen: dict[int, bytes] = {}
    running = None
    # a demo silent for 300 s is interrupted, which ends the loop below (not a hang)
    watchdog = threading.Timer(300, proc.send_signal, args=(signal.SIGINT,))
    watchdog.start()
    # wait until the first query has committed a batch; progress is polled, so a fast run
    # may go from 0/8 straight to 2/8 (any count from 1 will do: two more runs follow)
    for line in proc.stdout:
        seen.update(_descendants(proc.pid))
        running = re.search(r"golden: [1-8]/8 batches", line)
        if running:
            break
    watchdog.cancel()
    assert running, "the demo ended or stalled (300 s) before its first batch"
    seen.update(_descendants(proc.pid))
    kinds = b" ".join(seen.values())
    assert b"redis-server" in kinds and b"taskstate.sidecar" in kinds and b"java" in kinds
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, rest
    time.sleep(1)
    alive = {pid: c for pid, c in seen.items() if c and _running(pid, c)}
    assert alive == {}, alive


def _running(pid: int, cmdline: bytes) -> bool:
    """Whether the same process still runs.

    Exited processes and zombies do not count: in a container whose pid 1 does not reap
    orphans, dead children stay behind as zombies.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        same = Path(f"/proc/{pid}/cmdline").read_bytes() == cmdline
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return same and state not in ("Z", "X")
