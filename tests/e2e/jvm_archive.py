"""A class-data-sharing archive of the classes Spark's JVMs load, for this tier's JVMs.

Most of a short Spark JVM's life here is spent loading and linking Spark's classes: a
SparkSession with one mapInPandas job took 16.5-18.9 s on this kind of machine, and
9.2-10.0 s with the classes mapped from an archive (Java 17's dynamic AppCDS,
`-XX:ArchiveClassesAtExit`, then `-XX:SharedArchiveFile`). The archive is made once by
running `python -m tests.e2e.jvm_archive` (a small batch job and a small streaming
query) with the tier's JVM options and `-XX:ArchiveClassesAtExit`, and kept in the venv
(share/taskstate-tests): its name holds a digest of the JVM, the options and Spark's
jars, so a new venv, JDK or set of options makes a new one, which replaces the old.

What Spark does is the same with it or without it: a JVM whose class path differs from
the archive's (the launcher, a job with an extra class path) just loads its classes as
usual. So a failure to make it costs time, not a result: the tier goes on without it,
and says so. TASKSTATE_TEST_JVM_ARCHIVE=off runs without it; a path puts it there.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OFF = "off"
ENV = "TASKSTATE_TEST_JVM_ARCHIVE"
# the archive's own messages (a JVM whose class path differs says it cannot use it) stay
# out of the jobs' output, which tests read
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def _fingerprint(jvm_options: str) -> str:
    """A digest of what an archive is valid for: the JVM, its options, Spark's jars."""
    import pyspark

    plain = {k: v for k, v in os.environ.items() if k != "JDK_JAVA_OPTIONS"}  # no NOTE line
    java = subprocess.run(
        ["java", "-version"], capture_output=True, text=True, timeout=60, check=False, env=plain
    ).stderr
    jars = Path(pyspark.__file__).parent / "jars"
    listing = sorted(
        f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jars.glob("*.jar")
    )
    text = "\n".join([java, pyspark.__version__, jvm_options, *listing])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def share_spark_classes(scratch: Path) -> str:
    """The Java options that map the archive (made first when there is none), or "".

    The archive is made, and named, with the JVM options the tier's JVMs get
    (JDK_JAVA_OPTIONS). `scratch` holds it when the venv's folder cannot.
    """
    jvm_options = os.environ.get("JDK_JAVA_OPTIONS", "").strip()
    wanted = os.environ.get(ENV, "").strip()
    if wanted == OFF:
        return ""
    if wanted:
        archive = Path(wanted)
    else:
        home = Path(sys.prefix) / "share" / "taskstate-tests"
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError:
            home = scratch
        archive = home / f"spark-classes-{_fingerprint(jvm_options)}.jsa"
    if not archive.exists():
        if not wanted:  # made for other options, jars or JDK: 170 MB each, never used again
            for stale in archive.parent.glob("spark-classes-*.jsa"):
                stale.unlink(missing_ok=True)
        problem = _make(archive, jvm_options)
        if problem:
            warnings.warn(
                f"the e2e tier runs without a class-data archive of Spark's classes (its "
                f"JVMs start slower): {problem}. {ENV}=off runs without one, quietly.",
                stacklevel=1,
            )
            return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def _make(archive: Path, jvm_options: str) -> str:
    """Run the job that dumps the archive; what went wrong, or "" ."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    part = archive.with_name(f"{archive.name}.{os.getpid()}.part")
    env = dict(
        os.environ,
        JDK_JAVA_OPTIONS=f"{jvm_options} -XX:ArchiveClassesAtExit={part} {QUIET}".strip(),
        PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
    )
    root = Path(__file__).resolve().parents[2]
    try:
        r = subprocess.run(
            [sys.executable, "-m", "tests.e2e.jvm_archive"],
            cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        part.unlink(missing_ok=True)
        return "the job that makes it ran over 300 s"
    if r.returncode != 0 or not part.exists():
        part.unlink(missing_ok=True)
        return f"the job that makes it exited with {r.returncode}: {r.stderr[-1500:]}"
    os.replace(part, archive)
    return ""


def _job(checkpoint: Path) -> None:
    """Load what the tier's jobs load: a pandas UDF batch job and a stateful stream."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def doubled(frames: Iterator[Any]) -> Iterator[Any]:
        for df in frames:
            yield df.assign(y=df.id * 2)

    assert spark.range(1000, numPartitions=2).mapInPandas(doubled, "id long, y long").count()

    def counted(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        n = sum(len(df) for df in frames) + (state.get[0] if state.exists else 0)
        state.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def counted_rows(df: Any, _batch: int) -> None:
        df.count()

    source = checkpoint.parent / "events"
    spark.range(200).selectExpr("id % 4 AS k").write.json(str(source))
    events = spark.readStream.schema("k long").json(str(source))
    query = (
        events.groupBy("k")
        .applyInPandasWithState(counted, "k long, n long", "n long", "update", "NoTimeout")
        .writeStream.outputMode("update")
        .foreachBatch(counted_rows)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        _job(Path(d) / "checkpoint")
