"""Features a Spark line lacks are refused at the call, naming both versions and what to use.

The sessions are fakes that report a version (test_spark_glue, test_connect_glue); the
refusals of the installed pyspark itself run in every venv of the compatibility tier
(tests/e2e/spark_plugin/test_spark_versions.py).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from taskstate.client import ConfigError
from taskstate.spark_plugin import compat, configure
from taskstate.spark_plugin.compat import FEATURES, SparkVersionError
from taskstate.spark_plugin.glue import register_data_source

from .test_connect_glue import FakeConnectSession
from .test_spark_glue import FakeSpark


def spark_lines(root: Path) -> list[str]:
    """The tested versions in requirements/spark-lines (as bin/test reads them)."""
    text = (root / "requirements/spark-lines").read_text().splitlines()
    return [line.split()[0] for line in text if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_each_refusal_names_the_running_version_the_one_needed_and_what_instead(
    feature: str,
) -> None:
    f = FEATURES[feature]
    older = f"{f.since[0]}.{f.since[1] - 1}.9" if f.since[1] else "3.5.9"
    with pytest.raises(SparkVersionError) as e:
        compat.require(feature, FakeSpark(version=older))
    text = str(e.value)
    assert f"Spark {older}" in text and f"Spark {f.since[0]}.{f.since[1]} or newer" in text
    assert f.instead in text and isinstance(e.value, ConfigError)
    compat.require(feature, FakeSpark(version=f"{f.since[0]}.{f.since[1]}.0"))  # no refusal


def test_configure_on_a_classic_35_session_sets_the_properties_and_no_data_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow

    monkeypatch.setattr(pyarrow, "__version__", "25.0.0")  # the 3.5 line's pin: no warning
    spark = FakeSpark(version="3.5.9")
    configure(spark, namespace="my-job")
    assert spark.sparkContext.props["taskstate.namespace"] == "my-job"
    assert spark.dataSource.sources == [] and spark.conf.values == {}


def test_the_data_source_registered_on_35_is_refused() -> None:
    spark = FakeSpark(version="3.5.9")
    with pytest.raises(SparkVersionError, match=r"data source.*Spark 4\.0.*Spark 3\.5\.9"):
        register_data_source(spark, namespace="my-job")
    assert spark.dataSource.sources == []


def test_configure_on_a_35_connect_session_is_refused_and_sets_nothing() -> None:
    spark = FakeConnectSession(version="3.5.9")
    before = dict(spark.conf.values)
    with pytest.raises(SparkVersionError, match=r"Spark Connect.*Spark 3\.5\.9"):
        configure(spark, namespace="my-job", check=False)
    assert spark.conf.values == before and spark.dataSource.sources == []


@pytest.mark.parametrize("version", ["3.5.0", "4.1.0.dev1", "4.10.2"])
def test_versions_parse_to_major_and_minor(version: str) -> None:
    major, minor = (int(x) for x in version.split(".")[:2])
    assert compat.parse(version) == (major, minor)


def test_the_docs_table_says_what_compat_refuses_for_each_tested_line() -> None:
    root = Path(__file__).resolve().parents[3]
    text = (root / "docs/how-to/spark-versions.md").read_text()
    table = text.split("<!-- spark-versions:")[1].split("<!-- /spark-versions -->")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("|") and not line.startswith("|---")]  # fmt: skip
    header, body = rows[0][1:], {r[0]: r[1:] for r in rows[1:]}
    lines = spark_lines(root)
    assert header == [".".join(v.split(".")[:2]) for v in lines]
    for f in FEATURES.values():
        want = ["yes" if compat.parse(v) >= f.since else "" for v in header]
        got = ["yes" if c == "yes" else "" for c in body[f.title]]
        assert got == want, f.title
    assert {"refused", "no"} >= {c for r in body.values() for c in r} - {"yes"}


def test_pyproject_declares_exactly_the_tested_lines() -> None:
    root = Path(__file__).resolve().parents[3]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    spark = [d for d in deps["optional-dependencies"]["spark"] if d.startswith("pyspark")]
    lines = [compat.parse(v) for v in spark_lines(root)]
    (old, new) = lines[0], lines[-1]
    assert lines == sorted(lines)
    assert spark == [f"pyspark>={old[0]}.{old[1]},<{new[0]}.{new[1] + 1}"]


def test_configure_on_35_warns_of_a_pyarrow_its_applyinpandaswithstate_cannot_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow

    monkeypatch.setattr(pyarrow, "__version__", "26.0.1")
    with pytest.warns(RuntimeWarning, match=r"pyarrow 26\.0\.1 with Spark 3\.5\.9.*'pyarrow<26'"):
        configure(FakeSpark(version="3.5.9"), namespace="my-job")
    monkeypatch.setattr(pyarrow, "__version__", "25.0.0")
    assert compat.pin_problem(FakeSpark(version="3.5.9")) is None
    monkeypatch.setattr(pyarrow, "__version__", "26.0.1")
    assert compat.pin_problem(FakeSpark(version="4.0.5")) is None  # 4.x casts its offsets
