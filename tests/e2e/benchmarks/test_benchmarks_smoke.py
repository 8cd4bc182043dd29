"""`python -m benchmarks --quick` runs every figure end to end and checks its own results
(no timing is asserted: these machines are noisy). The Spark figures make this about 3 min,
in two runs at once (about 4-5 min in one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]

FIGURES = (  # name prefixes of figures checked only for being there
    "commit 2,000",
    "first write of 2,000 dict values",
    "restore 50,000",
    "restore 5,000",
    "sidecar RSS",
    "commit latency",
    "group block",
    "demo batch: taskstate vs plain dict",
    "demo batch: taskstate vs Spark",
    "data source read of 50,000 keys",
    "data source write of 50,000 keys",
    "data source read: peak Python worker RSS",
    "a session's first data source read of 300 rows",
    "block writing 2,000 keys, each with a ttl",
    "restore of 20,000 keys, half expired",
    "block writing 10 keys (Open + Commit)",
    "block writing 10 keys in one call (open_at='exit')",
    "sessionization",
)


# Every figure, in two runs at once (each its own Redis and sidecar), so that one run's
# Spark applications use the cores the other's leave idle: the Spark figures split about
# evenly (the demo's and recovery's against groups', sessions' and the data source's).
HALVES = (
    "commit,restore,latency,blocks,spark,recovery,handover,memory,rescale,expiry,sidecar",
    "groups,sessions,datasource",
)


def test_quick_benchmarks_run_and_report_every_figure(spark_ready: None, tmp_path: Path) -> None:
    from benchmarks.__main__ import FIGURES as ALL

    assert sorted(",".join(HALVES).split(",")) == sorted(ALL)  # each figure in one half
    runs = []
    for i, half in enumerate(HALVES):
        out, log, err = (tmp_path / f"b{i}.{x}" for x in ("json", "out", "err"))
        with log.open("w") as o, err.open("w") as e:  # files: a full pipe would stall a run
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks", "--quick", "--only", half, "--json", str(out)],
                cwd=ROOT, stdout=o, stderr=e, text=True,
            )  # fmt: skip
        runs.append((proc, out, log, err))
    stdout = ""
    figures: list[dict[str, Any]] = []
    machine: dict[str, Any] = {}
    try:
        for proc, out, log, err in runs:
            assert proc.wait(timeout=600) == 0, err.read_text()[-3000:]
            stdout += log.read_text()
            half_result = json.loads(out.read_text())
            figures += half_result["figures"]
            machine = half_result["machine"]
    finally:
        for proc, *_ in runs:
            if proc.poll() is None:
                proc.kill()
    result: dict[str, Any] = {"figures": figures, "machine": machine}
    names = [f["name"] for f in result["figures"]]
    for prefix in FIGURES:  # each figure ran and reported
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    (rec,) = [f for f in result["figures"] if f["name"].startswith("recovery: killed worker")]
    (big,) = [f for f in result["figures"] if f["name"].startswith("large-state batch")]
    assert big["detail"] == rec["detail"]  # one run of the three queries, two figures
    for side in ("taskstate", "taskstate_eager", "spark"):  # each query checked its state
        assert rec["detail"][side]["recovery_s"] > 0 and rec["detail"][side]["normal_ms"] > 0
    hand = [f for f in result["figures"] if f["name"].startswith("hand-over batch")]
    assert len(hand) == 2 and hand[0]["detail"]["40000_delta_restores"] == 5
    groups = [f for f in result["figures"] if f["name"].startswith("applyInPandasWithState")]
    # quick runs the plugin's query and GroupState's (the "sync" variant only in full runs)
    assert len(groups) == 1 and groups[0]["ours"] > 0 and "sync_ms" not in groups[0]["detail"]
    (sess,) = [f for f in result["figures"] if f["name"].startswith("sessionization")]
    assert sess["detail"]["closed_sessions"] > 0 and sess["detail"]["calls_per_task_and_batch"] > 0
    timed = sess["detail"]["state_us_per_call"]  # each variant's calls timed in its workers
    assert set(timed) == {"spark", "deferred"} and all(t["p50"] > 0 for t in timed.values())
    (mem,) = [f for f in result["figures"] if f["name"].startswith("executor memory")]
    (moved,) = [f for f in result["figures"] if f["name"].startswith("rescale 20,000 keys")]
    assert moved["ours"] > 0 and moved["baseline"] > 0
    assert mem["detail"]["rss_mib"]["unbounded"] > 0
    cpu = [f for f in result["figures"] if f["name"].startswith("sidecar CPU per block")]
    # quick: 1 and 2 clients, the Open at the enter and in one call with the Commit
    assert len(cpu) == 4 and all(f["detail"]["blocks_per_s"] > 0 for f in cpu)
    for f in result["figures"]:
        # the sidecar's RSS growth during the small restore may be nothing at all (its
        # pages fit in memory the sidecar already holds): a measurement, not a failure
        growth = f["name"].startswith("sidecar RSS growth")
        assert f["ours"] >= 0 and f["ratio"] > 0, f
        assert f["baseline"] >= 0 if growth else f["baseline"] > 0, f
    assert result["machine"]["cpus"] and "redis_server" in result["machine"]
    # the tables name every figure too
    for n in names:
        assert n in stdout


def test_unknown_figure_is_refused() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "nonsense"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "unknown figure" in r.stderr
