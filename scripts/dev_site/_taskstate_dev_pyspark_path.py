"""The dev venv's Spark Python processes import pyspark from site-packages.

Spark starts its Python processes (the workers' daemon, the Python data sources' planner
workers, the streaming source runner) with `$SPARK_HOME/python/lib/pyspark.zip` and
Spark's py4j zip first on `PYTHONPATH`. The zips hold no compiled files, and Python
cannot write them any, so each such process compiles the pyspark modules it imports from
source: 0.75 s of CPU for a daemon (0.97 s against 0.22 s from site-packages), 1.2 s
for a worker that imports pandas and pyarrow (2.1 s against 0.9 s). For a pip-installed
pyspark the zip holds the very files site-packages does, so this venv drops the zips
from `sys.path` and the same modules load compiled: the e2e tier's runs with
`spark.python.worker.reuse=false` (a worker per task) took a fifth less time.

bin/setup copies this file into the venv's site-packages with a `.pth` file that imports
it at every start of the venv's Python. It drops a zip only when it is the one inside
this site-packages' pyspark (and py4j's only when this site-packages holds the same py4j
version), so a Spark of another installation, or a packed environment without pyspark
(`taskstate spark-package --pack-env`), imports as Spark says. `TASKSTATE_DEV_PYSPARK_ZIP=keep`
keeps the zips (to run as Spark does on a cluster).
"""

from __future__ import annotations

import os
import sys

SWITCH = "TASKSTATE_DEV_PYSPARK_ZIP"


def without_spark_zips(path: list[str], site: str) -> list[str]:
    """`path` without the zips of the pyspark installed in `site` that `site` also holds."""
    if not any(p.endswith(".zip") for p in path):
        return path  # the usual start of a Python in this venv: nothing to look at
    lib = os.path.join(site, "pyspark", "python", "lib")
    if not os.path.isfile(os.path.join(site, "pyspark", "__init__.py")):
        return path  # no pyspark here (a packed environment): Spark's zips are its only one
    drop = {os.path.realpath(os.path.join(lib, "pyspark.zip"))}
    try:
        names = os.listdir(lib)
    except OSError:
        return path
    for name in names:  # py4j-<version>-src.zip: dropped where py4j <version> is installed
        if name.startswith("py4j-") and name.endswith("-src.zip"):
            version = name[len("py4j-") : -len("-src.zip")]
            if os.path.isdir(os.path.join(site, f"py4j-{version}.dist-info")):
                drop.add(os.path.realpath(os.path.join(lib, name)))
    return [p for p in path if not p.endswith(".zip") or os.path.realpath(p) not in drop]


if os.environ.get(SWITCH) != "keep":
    sys.path[:] = without_spark_zips(sys.path, os.path.dirname(os.path.abspath(__file__)))
