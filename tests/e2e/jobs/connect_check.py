"""What a Spark Connect client sees of a server that lacks taskstate's pieces.

Run as a script: `python connect_check.py --remote sc://... --namespace NS --sidecar S
--pyfiles taskstate-pyfiles.zip --report OUT.json`. Each step's outcome goes into the
JSON report the test reads:

- `bare`: configure() against a server whose Python cannot import taskstate;
- `artifacts`: again, after `spark.addArtifacts(pyfiles, pyfile=True)`, without sidecar=
  on a server without the executor plugin;
- `sidecar`: again, with sidecar=;
- `batch_job`: a TaskState block in a batch job's tasks (the code from the artifact);
- `no_namespace`: a TaskState block in a session that never called configure().
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any


def count_rows(frames: Iterator[Any]) -> Iterator[Any]:
    """mapInPandas: the rows a partition saw, kept in TaskState (a batch job: checkpoints)."""
    import pandas as pd
    from pyspark import TaskContext

    from taskstate.client import TaskState

    with TaskState(TaskContext.get(), component="check") as s:
        for f in frames:
            s["rows"] = s.get("rows", 0) + len(f)
        seen = s["rows"]
    yield pd.DataFrame({"n": [seen]})


def main(argv: list[str]) -> int:
    """Run the steps; write the report."""
    p = argparse.ArgumentParser()
    p.add_argument("--remote", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--sidecar", required=True)
    p.add_argument("--pyfiles", required=True)
    p.add_argument("--report", required=True)
    a = p.parse_args(argv)

    from pyspark.sql import SparkSession

    from taskstate.client import ConfigError
    from taskstate.spark_plugin import configure

    report: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        try:
            report[name] = fn()
        except ConfigError as exc:
            report[name] = f"ConfigError: {exc}"
        except Exception as exc:  # Spark's errors: their text is what the client sees
            report[name] = f"{type(exc).__name__}: {exc}"

    spark: Any = SparkSession.builder.remote(a.remote).create()

    def configured(sidecar: str | None = None) -> str:
        configure(spark, namespace=a.namespace, sidecar=sidecar)
        return "ok"

    step("bare", configured)
    spark.addArtifacts(a.pyfiles, pyfile=True)
    step("artifacts", configured)
    step("sidecar", lambda: configured(a.sidecar))
    step(
        "batch_job",
        lambda: sorted(
            r.n for r in spark.range(10).repartition(2).mapInPandas(count_rows, "n long").collect()
        ),
    )
    other: Any = SparkSession.builder.remote(a.remote).create()
    other.addArtifacts(a.pyfiles, pyfile=True)
    other.conf.set("spark.taskstate.sidecar", a.sidecar)
    step("no_namespace", lambda: other.range(2).mapInPandas(count_rows, "n long").collect())
    with open(a.report, "w") as f:
        json.dump(report, f, indent=1)
    spark.stop()
    other.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
