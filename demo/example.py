"""The core example: running totals per key in a streaming query, kept in TaskState.

A deterministic, replayable Python streaming source emits events (event_id, key, value);
the query hash-partitions them by key and, inside `mapInPandas`, keeps per key a running
`count` and `total` in `TaskState` (the batch id comes from the task's
`streaming.sql.batchId` local property). Every event is emitted with the totals after it,
to a file sink (exactly-once output). The same job can keep its state in a plain dict to
show what is lost without taskstate.

`taskstate example` runs the job four ways on a private redis-server and sidecar (or an
existing Redis with --redis-url) and compares each with the fault-free run:

- golden: no faults;
- worker: the Python worker is SIGKILLed in batch k, right after its commit;
- restart: the whole query (driver, executors, workers) is SIGKILLed in batch k after the
  commit, then started again from its checkpoint;
- plain dict: the worker fault again, with the state in a plain dict.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from taskstate.spark_plugin import compat

from .jobs import (
    APIS,
    expected_state,
    kill_process_groups,
    read_output,
    read_state,
    run_query,
    state_from_rows,
)

# -- the orchestrator (`taskstate example`) ------------------------------------------------


@dataclass
class RunResult:
    """One run compared with golden."""

    name: str
    state_kind: str
    faults: str
    rows: int
    identical_output: bool
    identical_state: bool
    seconds: float

    @property
    def identical(self) -> bool:
        """Output and final state both equal golden."""
        return self.identical_output and self.identical_state


class Runner:
    """Starts query processes (each in its own process group) against one sidecar."""

    def __init__(self, workdir: Path, redis_url: str, sidecar: str, ns: argparse.Namespace):
        self.workdir = workdir
        self.redis_url = redis_url
        self.sidecar = sidecar
        self.args = ns
        self.children: list[subprocess.Popen[bytes]] = []
        self.killed_executors: list[int] = []

    def env(self) -> dict[str, str]:
        """Environment for a query process."""
        env = dict(os.environ)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        return env

    def start(
        self, name: str, state: str, extra: Sequence[str] = (), sidecar: str | None = None
    ) -> subprocess.Popen[bytes]:
        """Start one query process for run `name`.

        On the shared sidecar, unless `sidecar` says otherwise ("": the tasks find their
        executor's own, as a job with the plugin does).
        """
        run_dir = self.workdir / name
        (run_dir / "faults").mkdir(parents=True, exist_ok=True)
        a = self.args
        cmd = [
            sys.executable,
            "-m",
            "taskstate.demo.example",
            "--query",
            "--api",
            a.api,
            "--namespace",
            f"{a.namespace_prefix}-{name}",
            "--sidecar",
            self.sidecar if sidecar is None else sidecar,
            "--state",
            state,
            "--batches",
            str(a.batches),
            "--events-per-batch",
            str(a.events_per_batch),
            "--keys",
            str(a.keys),
            "--partitions",
            str(a.partitions),
            "--master",
            a.master,
            "--out",
            str(run_dir / "out"),
            "--checkpoint",
            str(run_dir / "checkpoint"),
            "--fault-dir",
            str(run_dir / "faults"),
            *extra,
        ]
        log = open(run_dir / "query.log", "ab")
        proc = subprocess.Popen(  # noqa: S603 - our own module
            cmd, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.children.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen[bytes], name: str, timeout: float = 600) -> None:
        """Wait for a query process; fail with its log on error."""
        code = proc.wait(timeout=timeout)
        if code != 0:
            log = (self.workdir / name / "query.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"run {name!r} exited with {code}; its log ends with:\n{log}")

    def _wait_for_pause(self, proc: subprocess.Popen[bytes], name: str) -> None:
        """Wait until the run is paused in its fault batch (marker and executor pid written)."""
        marker = self.workdir / name / "faults" / "paused"
        deadline = time.monotonic() + 600
        while not marker.exists() or not (marker.parent / "executor-pid").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                self.wait(proc, name)
                raise RuntimeError(f"run {name!r} ended before the fault batch")
            time.sleep(0.1)

    def kill_all(self) -> None:
        """SIGKILL every query process group still alive."""
        kill_process_groups(self.children)

    def run(self, name: str, state: str, faults: str) -> float:
        """Run one scenario to the end; returns seconds taken.

        `faults`: none, worker, restart, executor (in the fault batch k), or
        worker+restart (the worker killed in batch k-1, then the whole query in batch k).
        """
        t0 = time.monotonic()
        k = str(self.args.fault_batch)
        if faults == "none":
            self.wait(self.start(name, state), name)
        elif faults == "worker":
            self.wait(self.start(name, state, ["--kill-worker-at", k]), name)
        elif faults in ("restart", "worker+restart"):
            extra = ["--pause-at", k]
            if faults == "worker+restart":
                if self.args.fault_batch < 1:
                    raise ValueError("worker+restart needs a fault batch of 1 or more")
                extra += ["--kill-worker-at", str(self.args.fault_batch - 1)]
            proc = self.start(name, state, extra)
            self._wait_for_pause(proc, name)
            os.killpg(proc.pid, signal.SIGKILL)  # driver, executors, workers: all at once
            proc.wait()
            self.wait(self.start(name, state), name)  # same checkpoint, same state
        elif faults == "executor":
            if not self.args.plugin_jar:
                raise ValueError("the executor fault needs --plugin-jar (taskstate spark-package)")
            extra = [
                "--pause-at",
                k,
                "--master",
                "local-cluster[2,1,1024]",
                "--plugin-jar",
                self.args.plugin_jar,
                "--redis-url",
                self.redis_url,
            ]
            # the tasks use their executor's own sidecar, as a production job does
            proc = self.start(name, state, extra, sidecar="")
            self._wait_for_pause(proc, name)
            pid = int((self.workdir / name / "faults" / "executor-pid").read_text())
            os.kill(pid, signal.SIGKILL)  # the executor JVM running partition 0 of batch k
            self.killed_executors.append(pid)
            self.wait(proc, name)
        else:
            raise ValueError(faults)
        return time.monotonic() - t0


SCENARIOS = (
    ("golden", "taskstate", "none"),
    ("worker-killed", "taskstate", "worker"),
    ("query-restarted", "taskstate", "restart"),
    ("plain-dict-worker-killed", "dict", "worker"),
)


def orchestrate(ns: argparse.Namespace) -> int:
    """Run the scenarios, compare them with golden, print the tables."""
    from taskstate.testing import RedisServer, SidecarProcess

    workdir = Path(ns.out or tempfile.mkdtemp(prefix="taskstate-example-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ns.namespace_prefix = ns.namespace_prefix or f"example-{uuid.uuid4().hex[:8]}"
    redis_server = None
    sidecar = None
    runner = None
    try:
        if ns.redis_url:
            redis_url = ns.redis_url
        else:
            print("starting a private redis-server ...", flush=True)
            redis_server = RedisServer(workdir / "redis").start()
            redis_url = redis_server.url
        sidecar = SidecarProcess(
            redis_url,
            workdir / "sidecar" / "sidecar.sock",
            extra=[] if ns.redis_url else ["--allow-volatile-redis"],  # a throwaway Redis
        )
        (workdir / "sidecar").mkdir(exist_ok=True)
        sidecar.start()
        print(f"sidecar: {sidecar.ready_line}", flush=True)
        runner = Runner(workdir, redis_url, sidecar.target, ns)
        chosen = [s for s in SCENARIOS if ns.scenarios == "all" or s[0] in ns.scenarios.split(",")]
        if chosen[0][0] != "golden":
            chosen.insert(0, SCENARIOS[0])
        results: list[RunResult] = []
        golden_rows: list[tuple[Any, ...]] = []
        golden_state: dict[str, Any] = {}
        for i, (name, state, faults) in enumerate(chosen, 1):
            print(
                f"[{i}/{len(chosen)}] {name}: state={state} faults={faults} "
                f"({ns.batches} batches) ...",
                flush=True,
            )
            secs = runner.run(name, state, faults)
            rows = read_output(workdir / name / "out")
            if state == "taskstate":
                final = read_state(redis_url, f"{ns.namespace_prefix}-{name}", ns.partitions)
            else:
                final = state_from_rows(rows)
            if name == "golden":
                golden_rows, golden_state = rows, final
            results.append(
                RunResult(
                    name,
                    state,
                    faults,
                    len(rows),
                    rows == golden_rows,
                    final == golden_state,
                    round(secs, 1),
                )
            )
            print(f"      done in {secs:.1f} s, {len(rows)} output rows", flush=True)
        truth = expected_state(ns.batches, ns.events_per_batch, ns.keys)
        _print_tables(results, golden_state, truth)
        summary = {
            "results": [asdict(r) | {"identical": r.identical} for r in results],
            "golden_matches_computed_truth": golden_state == truth,
            "workdir": str(workdir),
        }
        (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
        print(f"summary: {workdir / 'summary.json'}")
        ok = golden_state == truth and all(
            r.identical for r in results if r.state_kind == "taskstate"
        )
        return 0 if ok else 1
    finally:
        if runner is not None:
            runner.kill_all()
        if sidecar is not None:
            sidecar.kill()
        if redis_server is not None:
            redis_server.stop()


def _print_tables(results: list[RunResult], golden: dict[str, Any], truth: dict[str, Any]) -> None:
    top = sorted(golden.items(), key=lambda kv: (-kv[1]["total"], kv[0]))[:5]
    print("\ntop keys (golden):")
    print(f"  {'key':<8}{'count':>8}{'total':>10}")
    for k, v in top:
        print(f"  {k:<8}{v['count']:>8}{v['total']:>10}")
    print(f"golden equals the totals computed without Spark: {'yes' if golden == truth else 'NO'}")
    print(f"\n{'run':<28}{'state':<11}{'faults':<9}{'rows':>6}  identical to golden")
    for r in results:
        print(
            f"{r.name:<28}{r.state_kind:<11}{r.faults:<9}{r.rows:>6}  "
            f"{'yes' if r.identical else 'NO'}"
        )


def build_parser() -> argparse.ArgumentParser:
    """The example's options (also used by the tests to build a Runner)."""
    about = __doc__.split("\n\n")[0].replace("`", "")
    p = argparse.ArgumentParser(prog="taskstate example", description=about)
    p.add_argument("--batches", type=int, default=6,
                   help="micro-batches per run (default %(default)s)")  # fmt: skip
    p.add_argument("--events-per-batch", type=int, default=400,
                   help="events per batch (default %(default)s)")  # fmt: skip
    p.add_argument("--keys", type=int, default=40,
                   help="distinct keys the events count (default %(default)s)")  # fmt: skip
    p.add_argument("--partitions", type=int, default=4,
                   help="stateful tasks (default %(default)s)")  # fmt: skip
    p.add_argument("--fault-batch", type=int, default=3,
                   help="the batch in which faults strike (default %(default)s)")  # fmt: skip
    p.add_argument("--master", default="local[2,4]",
                   help="Spark master, with retries (default %(default)s)")  # fmt: skip
    p.add_argument("--api", default="mapInPandas", choices=APIS,
                   help="which Spark API runs the stateful step (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--plugin-jar",
        default="",
        help="the executor plugin jar (taskstate spark-package): enables the "
        "executor-kill fault, run under local-cluster[2,1,1024] (default: none)",
    )
    p.add_argument("--redis-url", help="use this Redis instead of a private redis-server "
                   "(default: a private one, gone at the end)")  # fmt: skip
    p.add_argument("--out", help="work directory (default: a new temporary directory)")
    p.add_argument(
        "--scenarios",
        default="all",
        help="comma-separated: golden, worker-killed, query-restarted, "
        "plain-dict-worker-killed, or all (default %(default)s)",
    )
    # one run of the query (used by the orchestrator and the tests)
    p.add_argument("--query", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--namespace", help=argparse.SUPPRESS)
    p.add_argument("--sidecar", help=argparse.SUPPRESS)
    p.add_argument(
        "--state", default="taskstate", choices=["taskstate", "dict"], help=argparse.SUPPRESS
    )
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--fault-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--kill-worker-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--pause-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--hold-at", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--group-faults", default="", help=argparse.SUPPRESS)  # faults.GROUP_FAULTS
    p.add_argument("--outages", default="", help=argparse.SUPPRESS)  # faults.OUTAGE_MOMENTS
    p.add_argument("--durability", default="applied", help=argparse.SUPPRESS)  # TaskState's
    p.add_argument("--conf", action="append", default=[], help=argparse.SUPPRESS)  # KEY=VALUE
    p.add_argument("--namespace-prefix", default="", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """`taskstate example` (orchestrator) or, with --query, one run of the query."""
    p = build_parser()
    ns = p.parse_args(argv)
    problem = compat.refusal(ns.api) if ns.api in compat.FEATURES else None
    if problem is not None:  # said before Spark starts
        p.error(str(problem))
    if ns.query:
        return run_query(ns)
    if ns.batches < 1 or not 0 <= ns.fault_batch < ns.batches:
        p.error("need --batches >= 1 and 0 <= --fault-batch < --batches")
    try:
        return orchestrate(ns)
    except KeyboardInterrupt:
        print("taskstate example: interrupted; stopped every process it started", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
