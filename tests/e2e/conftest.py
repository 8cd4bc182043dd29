"""Real PySpark, a real redis-server and the real sidecar process."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess, find_redis_server

from .jvm_archive import share_spark_classes

pytestmark = pytest.mark.e2e

JAR_IN_WHEEL = "taskstate/spark_plugin/taskstate-plugin.jar"

# Every JVM this tier starts in its environment (drivers, local-cluster executors, Connect
# servers: all through the `java` launcher, which reads JDK_JAVA_OPTIONS; the packaging
# tests build an environment of their own) lives for seconds to a minute, and the
# tier is bound by CPU on 2 cores: C2's compilations and the parallel collector's threads
# cost such a JVM more than they give back. C1 alone and the serial collector, against C1
# in the drivers only (what bin/test set before): one API's fault runs in
# test_streaming_apis.py 104 s -> 88 s and 95 s -> 91 s; against neither, 109 s -> 88 s.
# What Spark does is the same; speed is measured in benchmarks/, never here. Once Java
# is known to be there, spark_ready adds a class-data archive of Spark's classes to these
# options (jvm_archive.py): a JVM maps them where it would load them one by one.
# TASKSTATE_TEST_JVM_OPTIONS replaces these options ("" for the JVMs' defaults): needed
# when one's own Java options name a collector (two collectors stop a JVM at its start).
JVM_OPTIONS = os.environ.get(
    "TASKSTATE_TEST_JVM_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
).strip()


def _add_java_options(options: str) -> None:
    """Give every JVM started from here on `options` too (once, after any already set)."""
    before = os.environ.get("JDK_JAVA_OPTIONS", "")
    if options and options not in before:
        os.environ["JDK_JAVA_OPTIONS"] = f"{before} {options}".strip()


_add_java_options(JVM_OPTIONS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip a test whose Spark feature (marker spark_feature) the installed pyspark lacks,
    before its fixtures start anything: test_spark_versions.py checks that feature's
    refusal there instead."""
    from taskstate.spark_plugin import compat

    for item in items:
        for mark in item.iter_markers("spark_feature"):
            (feature,) = mark.args
            problem = compat.refusal(feature)
            if problem is not None:
                reason = f"{problem} (test_spark_versions.py checks the refusal)"
                item.add_marker(pytest.mark.skip(reason=reason))


def api_params(apis: tuple[str, ...]) -> list[Any]:
    """The APIs as parameters, each that needs a newer Spark marked with its feature."""
    from taskstate.spark_plugin.compat import FEATURES

    return [pytest.param(a, marks=pytest.mark.spark_feature(a)) if a in FEATURES else a
            for a in apis]  # fmt: skip


def _require(what: str, hint: str) -> None:
    pytest.fail(f"{what} is missing: {hint}", pytrace=False)


@pytest.fixture(scope="session")
def spark_ready(tmp_path_factory: pytest.TempPathFactory) -> None:
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        _require(str(exc.name), "pip install 'taskstate[spark]' (pyspark, pandas, pyarrow)")
    if shutil.which("java") is None:
        _require("java", "install a Java 17 runtime (Debian: apt-get install openjdk-17-jre)")
    _add_java_options(share_spark_classes(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        _require("redis-server", str(exc))
    with RedisServer(tmp_path_factory.mktemp("redis")) as r:
        yield r


@pytest.fixture(scope="module")
def sidecar(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    with SidecarProcess(redis_server.url, tmp_path_factory.mktemp("sc") / "s.sock") as s:
        yield s


@pytest.fixture(scope="session")
def wheel(spark_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """taskstate's wheel, built as a release is (setup.py compiles the plugin jar into it;
    TASKSTATE_REQUIRE_JAR=1 fails the build when it cannot)."""
    out = tmp_path_factory.mktemp("wheel")
    root = Path(__file__).resolve().parents[2]
    build = tmp_path_factory.mktemp("wheel-build")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(root), "--no-deps", "--no-build-isolation",
         "-w", str(out), "-q"],
        env={**os.environ, "TASKSTATE_REQUIRE_JAR": "1", "TMPDIR": str(build)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, f"the wheel did not build:\n{r.stderr[-3000:]}"
    shutil.rmtree(root / "build", ignore_errors=True)  # setuptools' scratch folder
    (whl,) = out.glob("taskstate-*.whl")
    with zipfile.ZipFile(whl) as z:  # the scripts are data of their own package (no warning)
        lua = {n.rpartition("/")[2] for n in z.namelist() if n.endswith(".lua")}
    assert lua == {p.name for p in (root / "sidecar/storage/redis/lua").glob("*.lua")}
    return whl


@pytest.fixture(scope="session")
def plugin_jar(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The executor plugin jar the wheel carries: every plugin test loads it in Spark.

    The compatibility tier (bin/test --spark) sets TASKSTATE_TEST_PLUGIN_JAR to the jar
    compiled against the pinned pyspark, as a release wheel carries it: one jar for every
    line.
    """
    given = os.environ.get("TASKSTATE_TEST_PLUGIN_JAR")
    if given:
        assert Path(given).is_file(), f"TASKSTATE_TEST_PLUGIN_JAR={given}: no such jar"
        return given
    wheel: Path = request.getfixturevalue("wheel")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert JAR_IN_WHEEL in names, f"the wheel carries no plugin jar: {names}"
        jar = tmp_path_factory.mktemp("jar") / "taskstate-plugin.jar"
        jar.write_bytes(z.read(JAR_IN_WHEEL))
    return str(jar)


@pytest.fixture(scope="session")
def spark(spark_ready: None) -> Iterator[Any]:
    """One in-process SparkSession for the e2e modules that run queries in this process:
    `local[2,4]` (task retries), `spark.python.worker.reuse=false` (a fresh worker for
    every Python runner), the RocksDB state store."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv
    s = (
        SparkSession.builder.master("local[2,4]")
        .appName("taskstate-attempt-paths")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def stored_state(redis: RedisServer, namespace: str, component: str) -> dict[str, Any]:
    """Every partition's committed state of a component, read straight from Redis."""
    c = redis.client()
    out: dict[str, Any] = {}
    for key in c.scan_iter(match=data_key(namespace, component, "*")):
        out.update({k.decode(): orjson.loads(v) for k, v in c.hgetall(key).items()})
    return out


def event_stream(spark: Any, per_batch: int, batches: int, keys: int) -> Any:
    """The replayable event source (demo/jobs.py): `batches` batches of `per_batch`
    events over `keys` keys (key_of)."""
    from taskstate.demo.jobs import event_stream as events

    # where Spark reads them from files (before 4.2), one folder a test and events: a query
    # the test restarts from its checkpoint finds the files it read, and any more batches
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    files = _EVENTS / re.sub(r"\W+", "_", test) / f"{per_batch}-{keys}"
    return events(spark, per_batch, batches, keys, files)


_EVENTS = Path(tempfile.mkdtemp(prefix="taskstate-events-"))
atexit.register(shutil.rmtree, _EVENTS, True)


def to_json_files(df: Any, tmp: Path) -> Any:
    """Start the query writing `df` to JSON files in tmp/out, checkpointed in tmp/ck."""
    return (
        df.writeStream.format("json")
        .option("path", str(tmp / "out"))
        .option("checkpointLocation", str(tmp / "ck"))
        .start()
    )


@pytest.fixture(scope="session")
def connect_server(spark_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Spark Connect server for every Connect test of the session (it takes ~13 s to
    start): `local[2,4]` (task retries), no executor plugin (the tests pass their
    sidecar to configure()), the executors' Python this venv's, with taskstate installed,
    as the docs' "the server's environment"; its URL."""
    import importlib.util

    from .connect_server import ConnectServer

    for module in ("grpc_status", "google.rpc", "zstandard"):
        if importlib.util.find_spec(module) is None:
            _require(module, "pip install 'taskstate[spark]' (the Spark Connect client)")
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    try:
        yield server.url
    finally:
        server.stop()
