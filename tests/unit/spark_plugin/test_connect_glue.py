"""configure() and with_batch_id() on a Spark Connect session, the streaming refusal, and
the server check's report, without a server: fakes for the Connect objects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from typing import Any

import pytest

from taskstate.client import ConfigError, LocalContext, TaskState
from taskstate.spark_plugin import configure, with_batch_id
from taskstate.spark_plugin.connect import _task_probe, is_connect
from taskstate.spark_plugin.server_check import PLUGIN_CLASS, problems, task_report
from taskstate.testing import FakeSidecar


class FakeConf:
    """A Connect session's `conf`: get with a default, set, unset."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class FakeRegistration:
    def __init__(self) -> None:
        self.sources: list[Any] = []

    def register(self, cls: Any) -> None:
        self.sources.append(cls)


class FakeConnectSession:
    """Looks like pyspark.sql.connect.session.SparkSession: no sparkContext at all."""

    def __init__(self, version: str = "4.3.0", **conf: str) -> None:
        self.version = version
        self.conf = FakeConf({"spark.app.id": "local-1795618924827", **conf})
        self.dataSource = FakeRegistration()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"[JVM_ATTRIBUTE_NOT_SUPPORTED] {name}")


FakeConnectSession.__module__ = "pyspark.sql.connect.session"


def test_a_connect_session_is_told_from_a_classic_one() -> None:
    assert is_connect(FakeConnectSession())
    assert not is_connect(object())


def test_configure_sets_session_confs_that_tasks_read_as_local_properties() -> None:
    spark = FakeConnectSession()
    configure(spark, namespace="my-job", sidecar="unix:///x.sock", check=False)
    assert spark.conf.values == {
        "spark.app.id": "local-1795618924827",
        "spark.taskstate.namespace": "my-job",
        "spark.taskstate.app": "local-1795618924827",
        "spark.taskstate.sidecar": "unix:///x.sock",
        "spark.sql.python.filterPushdown.enabled": "true",
    }
    # the taskstate data source too, as on a classic session
    assert [c.name() for c in spark.dataSource.sources] == ["taskstate"]
    # Spark hands SQL confs starting with `spark` to the tasks as local properties
    ctx = LocalContext(0, properties=dict(spark.conf.values))
    st = TaskState(ctx, component="c")
    assert st.config.namespace == "my-job" and st.config.sidecar == "unix:///x.sock"


def test_a_classic_local_property_wins_over_the_session_conf() -> None:
    ctx = LocalContext(
        0, properties={"taskstate.namespace": "thread", "spark.taskstate.namespace": "session"}
    )
    assert TaskState(ctx, component="c").config.namespace == "thread"


def test_configure_refuses_speculation_and_bad_names_on_connect() -> None:
    with pytest.raises(ConfigError, match="spark.speculation"):
        configure(FakeConnectSession(**{"spark.speculation": "true"}), namespace="ok")
    with pytest.raises(ConfigError, match="namespace"):
        configure(FakeConnectSession(), namespace="bad/name", check=False)
    with pytest.raises(ConfigError):
        configure(FakeConnectSession(), namespace="ok", sidecar="nonsense", check=False)


class ConnectFrame:
    def __init__(self, session: FakeConnectSession) -> None:
        self.sparkSession = session


def test_with_batch_id_sets_the_conf_of_the_query_session_for_the_call_only() -> None:
    session = FakeConnectSession()
    seen = []

    @with_batch_id
    def each(df: Any, batch_id: int) -> str:
        seen.append(df.sparkSession.conf.get("spark.taskstate.batchId"))
        return "done"

    assert each(ConnectFrame(session), 7) == "done" and seen == ["7"]
    assert "spark.taskstate.batchId" not in session.conf.values

    session.conf.set("spark.taskstate.batchId", "3")  # an outer value comes back

    @with_batch_id
    def fails(df: Any, batch_id: int) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fails(ConnectFrame(session), 8)
    assert session.conf.values["spark.taskstate.batchId"] == "3"


def test_tasks_read_the_batch_id_with_batch_id_set_classic_first() -> None:
    ctx = LocalContext(0, properties={"spark.taskstate.batchId": "7"})
    assert TaskState(ctx, component="c", namespace="n").batch_id == 7
    both = {"taskstate.batchId": "5", "spark.taskstate.batchId": "7"}
    assert TaskState(LocalContext(0, properties=both), component="c", namespace="n").batch_id == 5


@pytest.mark.parametrize(
    "signal", ["spark.sql.streaming.internal.stateStore.partitions", "sql.streaming.queryId"]
)
def test_a_streaming_task_without_a_batch_id_is_refused_before_it_opens(signal: str) -> None:
    ctx = LocalContext(3, properties={signal: "2"})
    with pytest.raises(ConfigError) as info:
        # no sidecar there: the refusal comes before any call
        TaskState(ctx, component="totals", namespace="n", sidecar="unix:///nowhere.sock")
    text = str(info.value)
    assert "'totals', partition 3" in text and signal in text and "with_batch_id" in text


def test_a_streaming_task_with_a_batch_id_and_a_batch_job_are_not_refused() -> None:
    streaming = {"spark.sql.streaming.internal.stateStore.partitions": "2"}
    ctx = LocalContext(0, batch_id=4, properties=streaming)
    assert TaskState(ctx, component="c", namespace="n").batch_id == 4
    with_conf = {**streaming, "spark.taskstate.batchId": "6"}
    assert (
        TaskState(LocalContext(0, properties=with_conf), component="c", namespace="n").batch_id == 6
    )
    assert TaskState(LocalContext(0), component="c", namespace="n").batch_id is None


def test_the_probe_runs_where_taskstate_cannot_be_imported(tmp_path: Any) -> None:
    """configure's check function is pickled by value: a server Python without taskstate
    (site-packages on the path, but not the .pth that installs taskstate) still runs it,
    and it reports the ImportError."""
    from pyspark import cloudpickle

    blob = tmp_path / "probe.pickle"
    blob.write_bytes(cloudpickle.dumps(_task_probe))  # type: ignore[no-untyped-call]
    code = "import pickle,sys; print(pickle.loads(open(sys.argv[1],'rb').read())(None))"
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    r = subprocess.run(
        [sys.executable, "-S", "-c", code, str(blob)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report == {"import": "ModuleNotFoundError: No module named 'taskstate'"}


def test_problems_name_what_the_server_lacks() -> None:
    missing = problems(
        {"import": "ModuleNotFoundError: No module named 'taskstate'"},
        namespace="ns",
        sidecar=None,
        plugin=False,
    )
    assert len(missing) == 1 and "cannot import taskstate" in missing[0]
    assert "spark.addArtifacts" in missing[0]

    no_sidecar = {
        "namespace": "ns",
        "sidecar": "unix:///tmp/taskstate-run/sidecar.sock",
        "plugin_sidecar": None,
        "health_error": "no answer",
    }
    (text,) = problems(no_sidecar, namespace="ns", sidecar=None, plugin=False)
    assert "executor plugin is not loaded" in text and PLUGIN_CLASS in text
    (text,) = problems(no_sidecar, namespace="ns", sidecar="unix:///s.sock", plugin=False)
    assert "does not answer" in text

    other_ns = {"namespace": "from-env", "sidecar": "unix:///s", "health": "SERVING"}
    (text,) = problems(other_ns, namespace="ns", sidecar=None, plugin=True)
    assert "TASKSTATE_NAMESPACE" in text
    sick = {"namespace": "ns", "sidecar": "unix:///s", "health": "NOT_SERVING"}
    (text,) = problems(sick, namespace="ns", sidecar=None, plugin=True)
    assert "Redis" in text
    ok = {"namespace": "ns", "sidecar": "unix:///s", "health": "SERVING"}
    assert problems(ok, namespace="ns", sidecar=None, plugin=True) == []


def test_task_report_resolves_as_a_task_would(
    fake: FakeSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    props = {"spark.taskstate.namespace": "ns", "spark.taskstate.sidecar": fake.target}
    monkeypatch.delenv("TASKSTATE_NAMESPACE", raising=False)
    monkeypatch.delenv("TASKSTATE_SIDECAR", raising=False)
    monkeypatch.setattr(pyspark.TaskContext, "get", lambda: LocalContext(0, properties=props))
    report = task_report()
    assert report["namespace"] == "ns" and report["sidecar"] == fake.target
    assert report["health"] == "SERVING"
    assert problems(report, namespace="ns", sidecar=fake.target, plugin=False) == []

    monkeypatch.setattr(pyspark.TaskContext, "get", lambda: LocalContext(0))
    assert "no namespace" in task_report()["config"]


def test_spark_package_prints_the_connect_servers_flags(tmp_path: Any) -> None:
    """No --py-files for a Connect server (its sessions' workers do not see them); the
    plugin, its Redis and speculation off, as for spark-submit."""
    from taskstate.spark_plugin.package import connect_python_notes, connect_server_flags

    flags = connect_server_flags(tmp_path, "redis://r:6379/0", None)
    assert flags == [
        f"--jars {tmp_path / 'taskstate-plugin.jar'}",
        f"--conf spark.plugins={PLUGIN_CLASS}",
        "--conf spark.taskstate.redisUrl=redis://r:6379/0",
        "--conf spark.speculation=false",
    ]
    packed = connect_server_flags(tmp_path, "redis://r:6379/0", tmp_path / "env.tar.gz")
    assert f"--archives {tmp_path / 'env.tar.gz'}#taskstate-env" in packed
    notes = " ".join(connect_python_notes(tmp_path))
    assert "spark.addArtifacts" in notes and "foreachBatch" in notes


@pytest.mark.parametrize(
    ("env", "props", "expected"),
    [
        ({"TASKSTATE_SIDECAR": "unix:///env.sock"}, {}, "unix:///env.sock"),
        ({}, {"taskstate.sidecar": "unix:///classic.sock"}, "unix:///classic.sock"),
        ({}, {"spark.taskstate.sidecar": "tcp://connect:7"}, "tcp://connect:7"),  # Connect
    ],
)
def test_the_data_source_finds_the_sidecar_a_task_finds(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], props: dict[str, str], expected: str
) -> None:
    from taskstate.client._config import TaskStateConfig
    from taskstate.spark_plugin.datasource import connect as source_connect
    from taskstate.spark_plugin.datasource.options import Options

    monkeypatch.delenv("TASKSTATE_SIDECAR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(source_connect, "local_property", props.get)
    task = TaskStateConfig.resolve(component="c", namespace="n", local_property=props.get)
    assert task.sidecar == expected
    assert source_connect.target(Options(namespace="n", component="c")) == expected
