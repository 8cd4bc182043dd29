"""configure(), with_batch_id() and resume() without Spark: fakes for the Spark objects."""

from __future__ import annotations

from typing import Any

import pytest

from taskstate.client import ConfigError, LocalContext, TaskState
from taskstate.spark_plugin import configure, resume, with_batch_id
from taskstate.testing import FakeSidecar


class FakeSparkContext:
    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = conf
        self.props: dict[str, str | None] = {}
        self.applicationId = "app-20261123-0001"

    def getConf(self) -> Any:  # noqa: N802
        return self

    def get(self, key: str, default: str) -> str:
        return self.conf.get(key, default)

    def setLocalProperty(self, key: str, value: str | None) -> None:  # noqa: N802
        self.props[key] = value

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802
        return self.props.get(key)


class FakeConf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class FakeRegistration:
    def __init__(self) -> None:
        self.sources: list[Any] = []

    def register(self, cls: Any) -> None:
        self.sources.append(cls)


class FakeSpark:
    def __init__(self, version: str = "4.3.0", **conf: str) -> None:
        self.version = version
        self.sparkContext = FakeSparkContext(conf)
        self.conf = FakeConf()
        self.dataSource = FakeRegistration()


def test_configure_sets_local_properties_tasks_read() -> None:
    spark = FakeSpark()
    configure(spark, namespace="my-job", sidecar="unix:///x.sock")
    props = spark.sparkContext.props
    assert props == {
        "taskstate.namespace": "my-job",
        "taskstate.sidecar": "unix:///x.sock",
        "taskstate.app": "app-20261123-0001",  # names attempts of RDD tasks too
    }
    ctx = LocalContext(0, properties={k: v for k, v in props.items() if v})
    st = TaskState(ctx, component="c")
    assert st.config.namespace == "my-job" and st.config.sidecar == "unix:///x.sock"
    # the taskstate data source, with the filter pushdown its reads use
    assert [c.name() for c in spark.dataSource.sources] == ["taskstate"]
    assert spark.dataSource.sources[0].defaults == {
        "namespace": "my-job",
        "sidecar": "unix:///x.sock",
    }
    assert spark.conf.values == {"spark.sql.python.filterPushdown.enabled": "true"}


def test_configure_refuses_speculation_and_bad_names() -> None:
    with pytest.raises(ConfigError, match="spark.speculation"):
        configure(FakeSpark(**{"spark.speculation": "true"}), namespace="ok")
    with pytest.raises(ConfigError, match="namespace"):
        configure(FakeSpark(), namespace="bad/name")
    with pytest.raises(ConfigError):
        configure(FakeSpark(), namespace="ok", sidecar="nonsense")


def test_with_batch_id_sets_the_property_for_the_call_only() -> None:
    class DF:
        sparkSession = FakeSpark()  # noqa: N815 - Spark's name

    df = DF()
    seen = []

    @with_batch_id
    def each(d: Any, batch_id: int) -> str:
        seen.append(d.sparkSession.sparkContext.getLocalProperty("taskstate.batchId"))
        return "done"

    assert each(df, 7) == "done" and seen == ["7"]
    assert df.sparkSession.sparkContext.getLocalProperty("taskstate.batchId") is None
    ctx = LocalContext(0, batch_id=3, properties={"taskstate.batchId": "7"})
    assert TaskState(ctx, component="c", namespace="n").batch_id == 7  # explicit wins


def test_resume_skips_checkpointed_items_and_checkpoints(fake: FakeSidecar, namespace: str) -> None:
    from taskstate.client import _cache

    def run(items: list[int], stop_at: int | None) -> list[int]:
        done = []
        with TaskState(
            LocalContext(0), component="c", namespace=namespace, sidecar=fake.target
        ) as s:
            for x in resume(items, s, every=3):
                if x == stop_at:
                    raise RuntimeError("task died")
                s["sum"] = s.get("sum", 0) + x
                done.append(x)
        return done

    with pytest.raises(RuntimeError):
        run(list(range(10)), stop_at=7)
    _cache.sessions.clear()
    assert run(list(range(10)), stop_at=None) == [6, 7, 8, 9]  # resumed after 6 items
    with TaskState(LocalContext(0), component="c", namespace=namespace, sidecar=fake.target) as s:
        assert s["sum"] == sum(range(10)) and s.position == 9


def test_resume_refuses_a_position_it_did_not_write(fake: FakeSidecar, namespace: str) -> None:
    with TaskState(LocalContext(0), component="c", namespace=namespace, sidecar=fake.target) as s:
        s.commit(position="not-a-count")
    with (
        TaskState(LocalContext(0), component="c", namespace=namespace, sidecar=fake.target) as s,
        pytest.raises(ConfigError, match="position"),
    ):
        list(resume([1, 2], s))
