"""taskstate's speed against the limits, as ratios measured in the same run.

    python -m benchmarks [--quick] [--json FILE] [--only commit,restore,...]

Every figure runs the real path (client -> sidecar process -> redis-server, both on Unix
sockets in a temp directory) and a baseline on the same Redis in the same run, because
these machines are noisy. Each figure also checks its own result (the committed hash,
the restored mapping), so a broken path cannot produce a fast number. One module per
figure in benchmarks/figures/, each with its sizes (`SIZES`) and `measure`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from taskstate.testing import RedisServer, SidecarProcess

from .common import Bench, Figure, machine, say

# name -> its module in benchmarks/figures/, in the order they run
FIGURES = {
    "commit": "commit",
    "restore": "restore",
    "latency": "latency",
    "blocks": "blocks",
    "spark": "demo",
    "recovery": "recovery",
    "handover": "handover",
    "memory": "memory",
    "groups": "groups",
    "sessions": "sessions",
    "rescale": "rescale",
    "datasource": "datasource",
    "expiry": "expiry",
    "sidecar": "sidecar_cpu",
}


def run(quick: bool, only: set[str]) -> dict[str, Any]:
    """Start Redis and the sidecar, measure the chosen figures."""
    figures: list[Figure] = []
    work = Path(tempfile.mkdtemp(prefix="taskstate-bench-"))
    with RedisServer(work / "redis") as redis:
        side = SidecarProcess(redis.url, work / "s.sock").start()
        bench = Bench(redis, side, work)
        try:
            for name, module in FIGURES.items():
                if only and name not in only:
                    continue
                figure = importlib.import_module(f"benchmarks.figures.{module}")
                say(f"measuring {name} ...")
                t0 = time.monotonic()
                figures.extend(figure.measure(bench, figure.SIZES["quick" if quick else "full"]))
                say(f"{name} done in {time.monotonic() - t0:.1f} s")
        finally:
            side.kill()
    return {"machine": machine(), "quick": quick, "figures": [asdict(f) for f in figures]}


def table(result: dict[str, Any]) -> str:
    """The figures as a plain-text table."""
    rows = [("figure", "taskstate", "baseline", "ratio", "target", "met")]
    for f in result["figures"]:
        rows.append((
            f["name"], f"{f['ours']:,.3g} {f['unit']}", f"{f['baseline']:,.3g} {f['unit']}",
            f"{f['ratio']:.2f}", f["target"], {True: "yes", False: "NO", None: "-"}[f["met"]],
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, optionally write JSON. Exit 0 when every figure ran."""
    doc = __doc__ or ""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=doc.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (seconds, for CI)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--only", default="", help=f"comma-separated: {','.join(FIGURES)}")
    a = p.parse_args(argv)
    only = {x for x in a.only.split(",") if x}
    unknown = only - set(FIGURES)
    if unknown:
        p.error(f"unknown figure(s): {', '.join(sorted(unknown))}")
    result = run(a.quick, only)
    print(table(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2))
        say(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
