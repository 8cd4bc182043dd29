"""What each supported Spark line has, in one place.

taskstate runs on Spark 3.5 (Scala 2.12) and 4.0 to 4.3 (Scala 2.13). A feature that needs
a newer Spark than the one running is refused where it is called, with a `SparkVersionError`
naming both versions and what to use instead. docs/how-to/spark-versions.md shows
this table; a test checks that the two agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from taskstate.client import ConfigError


class SparkVersionError(ConfigError):
    """A taskstate feature that the running Spark version does not have."""


@dataclass(frozen=True)
class Feature:
    """A feature taskstate refuses before `since`, and what to use there instead."""

    title: str
    since: tuple[int, int]
    instead: str

    @property
    def needs(self) -> str:
        """The version it needs, as 'major.minor'."""
        return f"{self.since[0]}.{self.since[1]}"


FEATURES: dict[str, Feature] = {
    "data source": Feature(
        "the `taskstate` data source (Python data sources)",
        (4, 0),
        "read state with `taskstate export` or AdminClient.read, and seed it with "
        "`taskstate import`",
    ),
    "filter pushdown": Feature(
        "the `taskstate` data source's filter pushdown (partition and key filters)",
        (4, 1),
        "the source without pushdown, which Spark filters after the read (configure() "
        "registers it so on Spark 4.0)",
    ),
    "transformWithStateInPandas": Feature(
        "transformWithStateInPandas with TaskStateProcessor",
        (4, 0),
        "applyInPandasWithState with TaskState (docs/how-to/spark-apis.md)",
    ),
    "transformWithState": Feature(
        "transformWithState (rows) with TaskStateProcessor",
        (4, 1),
        "transformWithStateInPandas (Spark 4.0) or applyInPandasWithState",
    ),
    "Spark Connect": Feature(
        "configure() on a Spark Connect session",
        (4, 0),
        "a classic session (SparkSession.builder without .remote)",
    ),
    "checkpoint repartition": Feature(
        "Spark's checkpointManager.repartition before `taskstate rescale`",
        (4, 2),
        "`taskstate rescale` alone, for queries whose only state is in taskstate",
    ),
}


# A difference taskstate's own code absorbs (no user feature): a Python streaming source's
# latestOffset(start, limit) is told where the batch starts from Spark 4.2 on; before, a
# latestOffset() is told nothing (demo/jobs.py reads files there instead).
STREAM_READER_START = (4, 2)


def parse(version: str) -> tuple[int, int]:
    """(major, minor) of a Spark version string such as '3.5.9' or '4.1.0.dev1'."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        raise ValueError(f"not a Spark version: {version!r}")
    return int(m[1]), int(m[2])


def running(spark: Any = None) -> str:
    """The running Spark's version.

    The session's when there is one (a Connect server may differ from its client), else
    the installed pyspark's.
    """
    if spark is not None:
        return str(spark.version)
    import pyspark

    return str(pyspark.__version__)


def has(feature: str, spark: Any = None) -> bool:
    """Whether the running Spark has `feature` (a key of FEATURES)."""
    return at_least(FEATURES[feature].since, spark)


def at_least(version: tuple[int, int], spark: Any = None) -> bool:
    """Whether the running Spark is `version` (major, minor) or newer."""
    return parse(running(spark)) >= version


def refusal(feature: str, spark: Any = None) -> SparkVersionError | None:
    """The error that refuses `feature` on the running Spark, or None where it has it."""
    if has(feature, spark):
        return None
    f = FEATURES[feature]
    return SparkVersionError(
        f"{f.title} needs Spark {f.needs} or newer; this is Spark {running(spark)}. "
        f"Use {f.instead}."
    )


def pin_problem(spark: Any = None) -> str | None:
    """What this Python's packages lack for the running Spark line, or None.

    pyspark 3.5's applyInPandasWithState passes float offsets to pyarrow's
    RecordBatch.slice, which pyarrow 26 refuses.
    """
    if at_least((4, 0), spark):
        return None
    import pyarrow

    if parse(pyarrow.__version__) >= (26, 0):
        return (
            f"pyarrow {pyarrow.__version__} with Spark {running(spark)}: its "
            "applyInPandasWithState fails (\"'numpy.float64' object cannot be interpreted as "
            "an integer\"); install 'pyarrow<26' where the driver and the executors run"
        )
    return None


def require(feature: str, spark: Any = None) -> None:
    """Refuse `feature` when the running Spark is older than the version it needs."""
    problem = refusal(feature, spark)
    if problem is not None:
        raise problem
