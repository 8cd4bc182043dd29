"""Writing a DataFrame as a component's state, all or nothing (sidecar: storage/redis/seed.py).

`SeedWriter.begin` (on the driver, when Spark plans the write) checks the DataFrame's
columns (`key` of a type Spark's hash partitioning places, `value` JSON text) and begins
the write with the sidecar, which holds the component. Each Spark task sends its rows in
pages; the sidecar places each key where `repartition(partitions, "key")` would, whatever
the DataFrame's own partitioning. `commit` (on the driver, once every task succeeded)
makes them the component's state at once; `abort` undoes. A null key, a value that is not
JSON, or a key written twice fails the write and nothing is visible.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack
import orjson
import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from taskstate.client import ConfigError, InvalidRequestError, SidecarUnavailableError
from taskstate.proto import taskstate_pb2 as pb

from .connect import client_for, unreachable
from .options import FORMAT, Options

PAGE_BYTES = 4 << 20  # a page of a write stays well under the sidecar's message limit

# the key column's Spark type -> the key type the sidecar places it by (spark_hash.py)
KEY_TYPES: dict[type[DataType], str] = {
    StringType: "string",
    IntegerType: "int",
    LongType: "long",
    ShortType: "short",
    ByteType: "byte",
    BooleanType: "boolean",
    FloatType: "float",
    DoubleType: "double",
    DateType: "date",
}


@dataclass
class SeedMessage(WriterCommitMessage):
    """What a Spark task of the write tells the driver: which attempt wrote, how much."""

    source: int
    attempt: int
    keys: int


class SeedWriter(DataSourceArrowWriter):
    """One write of the data source (see the module docstring)."""

    def __init__(self, options: Options, seed_id: str, key_type: str) -> None:
        self.options = options
        self.seed_id = seed_id
        self.key_type = key_type

    @classmethod
    def begin(cls, options: Options, schema: StructType, overwrite: bool) -> SeedWriter:
        """Check the DataFrame's columns, then begin the write (on the driver)."""
        key_type = _key_type(options, schema)
        req = pb.SeedBeginRequest(
            namespace=options.namespace,
            component=options.component,
            partitions=options.partitions or 0,
            overwrite=overwrite,
            key_type=key_type,
        )
        if options.batch_id is not None:
            req.batch = options.batch_id
        if options.quiet_seconds is not None:
            req.quiet_seconds = options.quiet_seconds
        if options.lease_seconds is not None:
            req.lease_seconds = options.lease_seconds
        try:
            started = client_for(options).seed_begin(req)
        except SidecarUnavailableError as exc:
            raise unreachable(options, exc) from None
        for note in started.settled:
            print(f"{FORMAT} data source: {note}", file=sys.stderr, flush=True)
        return cls(options, started.seed_id, key_type)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SeedMessage:
        """Send this Spark task's rows in pages (in a Spark task)."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None  # noqa: S101 - Spark runs write() in a task
        source, attempt = ctx.partitionId(), ctx.attemptNumber()
        o = self.options
        client = client_for(o)
        as_text = _KEY_TEXT[self.key_type]
        flat: list[str] = []
        size = sent = 0

        def send() -> None:
            nonlocal flat, size, sent
            req = pb.SeedStageRequest(namespace=o.namespace, component=o.component,
                                      seed_id=self.seed_id, source=source, attempt=attempt,
                                      packed=msgpack.packb(flat))  # fmt: skip
            sent += client.seed_stage(req)
            flat, size = [], 0

        for rb in iterator:
            keys = rb.column("key").to_pylist()
            values = rb.column("value").to_pylist()
            for k, v in zip(keys, values, strict=True):
                text = _checked(o, k, v, as_text)
                flat += (text, v)
                size += len(text) + len(v) + 8
                if len(flat) >= 2 * o.page_keys or size >= PAGE_BYTES:
                    send()
        if flat:
            send()
        return SeedMessage(source, attempt, sent)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Make the write visible (on the driver, once every task succeeded)."""
        sources = [m for m in messages if isinstance(m, SeedMessage)]
        req = pb.SeedCommitRequest(
            namespace=self.options.namespace,
            component=self.options.component,
            seed_id=self.seed_id,
            sources=[pb.SeedSource(source=m.source, attempt=m.attempt, keys=m.keys)
                     for m in sources],
        )  # fmt: skip
        done = client_for(self.options).seed_commit(req)
        print(
            f"{FORMAT} data source: wrote {self.options.where}: {done.keys} keys in "
            f"{done.tasks} tasks at batch {done.batch}",
            file=sys.stderr,
            flush=True,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Undo the write (on the driver, when a task failed for good)."""
        o = self.options
        client_for(o).seed_abort(o.namespace, o.component, self.seed_id)


def _key_type(options: Options, schema: StructType) -> str:
    """The key type of the DataFrame's `key` column; ConfigError before anything is written."""
    names = [f.name for f in schema.fields]
    if sorted(names) != ["key", "value"]:
        raise ConfigError(
            f"{FORMAT} data source, writing {options.where}: the DataFrame has columns "
            f"{names}; it must have exactly `key` and `value` (the value as JSON text, e.g. "
            "to_json(struct(...)) AS value)"
        )
    key, value = schema["key"].dataType, schema["value"].dataType
    if not isinstance(value, StringType):
        raise ConfigError(
            f"{FORMAT} data source, writing {options.where}: column `value` is "
            f"{value.simpleString()}; it must be JSON text (to_json(...), or a string of JSON)"
        )
    kind = KEY_TYPES.get(type(key))
    if kind is None:
        raise ConfigError(
            f"{FORMAT} data source, writing {options.where}: column `key` is "
            f"{key.simpleString()}, which the partitioning of taskstate's keys cannot place; "
            f"use one of {', '.join(t().simpleString() for t in KEY_TYPES)} (the column the "
            "job partitions by)"
        )
    return kind


# how a key column's value becomes a state key's text (spark_hash.py reads it back)
_KEY_TEXT: dict[str, Callable[[Any], str]] = {
    "string": str,
    "int": str,
    "long": str,
    "short": str,
    "byte": str,
    "boolean": str,
    "float": repr,
    "double": repr,
    "date": lambda d: d.isoformat() if isinstance(d, datetime.date) else str(d),
}


def _checked(options: Options, key: Any, value: Any, as_text: Callable[[Any], str]) -> str:
    """The key's text; InvalidRequestError for a null key or a value that is not JSON."""
    if key is None:
        raise InvalidRequestError(
            f"{FORMAT} data source, writing {options.where}: a row has a null key. Nothing "
            "was written. Filter them out (where key IS NOT NULL) or give them a key."
        )
    text = as_text(key)
    if value is None:
        raise InvalidRequestError(
            f"{FORMAT} data source, writing {options.where}: key {text[:80]!r} has a null "
            "value. Nothing was written. Write JSON text (to_json(...)); delete keys by "
            "leaving them out of an overwrite."
        )
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"{FORMAT} data source, writing {options.where}: the value of key {text[:80]!r} "
            f"is not JSON ({exc}): {value[:80]!r}. Nothing was written."
        ) from None
    return text
