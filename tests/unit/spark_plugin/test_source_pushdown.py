"""A source registered by hand reads without filter pushdown; configure()'s pushes filters.

Spark's planner refuses a reader that implements pushFilters while
spark.sql.python.filterPushdown.enabled is off (DATA_SOURCE_PUSHDOWN_DISABLED,
pyspark/sql/worker/plan_data_source_read.py); this asks the same question it asks.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader

from taskstate.spark_plugin.datasource import TaskStateDataSource

OPTIONS = {"namespace": "shop", "component": "totals", "sidecar": "unix:///tmp/none.sock"}


def _pushes_filters(reader: DataSourceReader) -> bool:
    return getattr(reader.pushFilters, "__func__", None) is not DataSourceReader.pushFilters


def test_a_source_registered_by_hand_reads_without_pushing_filters() -> None:
    reader = TaskStateDataSource(OPTIONS).reader(schema=None)  # type: ignore[arg-type]
    assert not _pushes_filters(reader)


def test_the_source_configure_registers_pushes_filters_and_keeps_its_defaults() -> None:
    source = TaskStateDataSource.with_defaults(pushdown=True, namespace="shop")
    reader = source({"component": "totals", "sidecar": "unix:///tmp/none.sock"}).reader(
        schema=None  # type: ignore[arg-type]
    )
    assert _pushes_filters(reader)
    assert source.defaults == {"namespace": "shop"} and source.name() == "taskstate"
    assert source.with_defaults(sidecar="x").pushdown  # kept by a further default
