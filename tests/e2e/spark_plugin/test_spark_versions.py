"""The installed Spark line, as a user meets it: each feature it has works, each it lacks is
refused at the call, naming the running version, the one needed and what to use instead.

Runs in every venv of the compatibility tier (bin/test --spark VERSION): on 4.3 every
branch below takes the working side, on 3.5 most take the refusing side.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import pyspark
import pytest

from taskstate.proto.properties import NAMESPACE_PROPERTY
from taskstate.spark_plugin import compat, configure
from taskstate.spark_plugin.compat import FEATURES, SparkVersionError
from taskstate.spark_plugin.glue import register_data_source
from taskstate.testing import SidecarProcess

pytestmark = [pytest.mark.e2e, pytest.mark.compat]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter of this venv (a refused import stays refused)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "feature"),
    [
        ("taskstate.spark_plugin.processor", "transformWithStateInPandas"),
        ("taskstate.spark_plugin.datasource", "data source"),
    ],
)
def test_a_module_imports_where_spark_has_its_feature_and_is_refused_elsewhere(
    name: str, feature: str
) -> None:
    r = _python(f"import {name}")
    if compat.has(feature):
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    since = FEATURES[feature].since
    assert last.startswith("taskstate.spark_plugin.compat.SparkVersionError: "), r.stderr
    assert f"this is Spark {pyspark.__version__}" in last
    assert f"needs Spark {since[0]}.{since[1]} or newer" in last


def test_configure_sets_the_namespace_and_registers_the_source_where_there_is_one(
    spark: Any, sidecar: SidecarProcess
) -> None:
    ns = f"versions-{uuid.uuid4().hex[:6]}"
    configure(spark, namespace=ns, sidecar=sidecar.target)
    assert spark.sparkContext.getLocalProperty(NAMESPACE_PROPERTY) == ns
    if compat.has("data source", spark):  # registered, with configure()'s defaults
        with pytest.raises(Exception, match=f"{ns}/none has no stored state"):
            spark.read.format("taskstate").option("component", "none").load().count()
        return
    with pytest.raises(SparkVersionError, match=f"this is Spark {spark.version}"):
        register_data_source(spark, namespace=ns)


@pytest.mark.parametrize("api", ["transformWithStateInPandas", "transformWithState"])
def test_the_demo_refuses_an_api_this_spark_lacks_before_spark_starts(api: str) -> None:
    # --batches 0 ends the run at its next check when the API is there: nothing starts
    r = _python(
        "import sys; from taskstate.demo.example import main; "
        f"sys.exit(main(['--api', '{api}', '--batches', '0']))"
    )
    assert r.returncode == 2, r.stderr
    if compat.has(api):  # test_streaming_apis.py runs the API itself
        assert "need --batches >= 1" in r.stderr and "needs Spark" not in r.stderr
        return
    since = FEATURES[api].since
    want = f"needs Spark {since[0]}.{since[1]} or newer; this is Spark {pyspark.__version__}"
    assert want in r.stderr
