"""The reader Spark pushes filters to, on Spark 4.1 and later.

Spark 4.0 has no filter pushdown for Python data sources: its reads take the whole
component, and Spark filters the rows.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..compat import require

require("filter pushdown")

from pyspark.sql.datasource import (  # noqa: E402
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from .read import Reader  # noqa: E402


class PushdownReader(Reader):
    """A Reader to which Spark pushes `partition` filters and `key = / IN` filters.

    Needs spark.sql.python.filterPushdown.enabled=true (configure() sets it).
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - Spark's
        """Take the filters on `partition` and on `key` equality; Spark keeps the rest."""
        for f in filters:
            column = f.attribute if hasattr(f, "attribute") else ()
            if column == ("partition",) and isinstance(f, EqualTo | In):
                values = {int(v) for v in (f.value if isinstance(f, In) else [f.value])}
                self.only_partitions = values if self.only_partitions is None else (
                    self.only_partitions & values)  # fmt: skip
            elif column == ("partition",) and isinstance(
                f, GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
            ):
                op = {GreaterThan: "gt", GreaterThanOrEqual: "ge", LessThan: "lt",
                      LessThanOrEqual: "le"}[type(f)]  # fmt: skip
                self.partition_bounds.append((op, int(f.value)))
            elif column == ("key",) and isinstance(f, EqualTo | In):
                keys = tuple(str(v) for v in (f.value if isinstance(f, In) else [f.value]))
                if self.only_keys is not None:
                    keys = tuple(k for k in keys if k in self.only_keys)
                self.only_keys = tuple(dict.fromkeys(keys))
            else:
                yield f
