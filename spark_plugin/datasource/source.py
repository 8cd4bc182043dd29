"""`TaskStateDataSource`: the `taskstate` format for spark.read and df.write."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
from pyspark.sql.types import StructType

from .options import FORMAT, Options
from .read import READ_SCHEMA, ChangesReader, Reader
from .write import SeedWriter


class TaskStateDataSource(DataSource):
    """A component's committed state as rows, and a DataFrame written as its state.

    Read: one row per key, `partition int, key string, value string, batch long` (the
    value's JSON text; `batch` the committed batch of the key's task), plus `deleted
    boolean` with option changesSinceBatch. Write: a DataFrame with columns `key` and
    `value` (JSON text), mode append or overwrite. docs/how-to/state-as-data.md.

    `configure(spark, namespace=..., sidecar=...)` registers it with those as defaults
    (`defaults`): a read or write then needs only the component. It also turns on the
    conf Spark's filter pushdown needs (`pushdown`); registered by hand, the source reads
    without pushing filters, as Spark refuses a reader that would while the conf is off.
    """

    defaults: ClassVar[dict[str, str]] = {}  # options a read or write need not give
    pushdown: ClassVar[bool] = False  # partition and key filters pushed to the reads

    @classmethod
    def name(cls) -> str:
        """The format name: `spark.read.format("taskstate")`."""
        return FORMAT

    def schema(self) -> str:
        """The rows a read gives."""
        changes = self._options(writing=False).changes_since_batch is not None
        return READ_SCHEMA + (", deleted boolean" if changes else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader of the component's state (with `pushdown`, of the tasks and keys asked)."""
        options = self._options(writing=False)
        if options.changes_since_batch is not None:
            return ChangesReader(options)
        if not self.pushdown:
            return Reader(options)
        from .pushdown import PushdownReader  # Spark 4.1+: filter pushdown

        return PushdownReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A writer of the component's state: begun here, on the driver."""
        return SeedWriter.begin(self._options(writing=True), schema, overwrite)

    def _options(self, *, writing: bool) -> Options:
        given = {k.lower(): v for k, v in self.options.items()}
        return Options.parse({**self.defaults, **given}, writing=writing)

    @classmethod
    def with_defaults(
        cls, *, pushdown: bool = False, **defaults: str | None
    ) -> type[TaskStateDataSource]:
        """This data source with default options (e.g. the namespace and the sidecar).

        `pushdown`: its reads push partition and key filters down (Spark needs
        spark.sql.python.filterPushdown.enabled=true for that).
        """
        given = {k.lower(): v for k, v in defaults.items() if v is not None}
        extra = {"defaults": {**cls.defaults, **given}, "pushdown": pushdown or cls.pushdown}
        return type(cls.__name__, (cls,), extra)

    def __repr__(self) -> str:
        return f"TaskStateDataSource({dict(self.options)!r})"
