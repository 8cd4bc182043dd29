"""A StatefulProcessor base for transformWithStateInPandas / transformWithState.

    class Totals(TaskStateProcessor):
        component = "totals"

        def handleInputRows(self, key, rows, timerValues):
            for pdf in rows:
                ...  # read and write self.state, a TaskState
            yield result

`init` restores (Open + Restore, once per task) and `close` commits. Spark also calls
`init` and `close` on the driver to collect schemas; there is no task there, so nothing
is opened. An exception in the task skips `close`: nothing is committed and the retried
task rolls the batch back.
"""

from __future__ import annotations

from typing import Any, ClassVar

from taskstate.client import TaskState

from .compat import require

require("transformWithStateInPandas")  # Spark 3.5 has no StatefulProcessor

from pyspark import TaskContext  # noqa: E402
from pyspark.sql.streaming.stateful_processor import (  # noqa: E402
    StatefulProcessor,
    StatefulProcessorHandle,
)


class TaskStateProcessor(StatefulProcessor):
    """A StatefulProcessor whose `self.state` is the task's TaskState.

    For transformWithStateInPandas (Spark 4.0+) and transformWithState (4.1+). Subclass
    it and set `component` and `partitions` (optionally `namespace`, `sidecar`, `mode`,
    `durability`). `init` opens the task's state on each executor; `close` commits what
    changed. Keep per-key state in `self.state`, keyed by the grouping key's text. The
    block takes the class's settings only (no ttl, version or open_at).

    Example:
        ```python
        class Totals(TaskStateProcessor):
            component = "totals"
            partitions = 8  # the query's spark.sql.shuffle.partitions

            def handleInputRows(self, key, rows, timerValues):
                total = self.state.get(str(key[0]), 0)
                for pdf in rows:
                    total += int(pdf["value"].sum())
                self.state[str(key[0])] = total
                yield pd.DataFrame({"key": [key[0]], "total": [total]})
        ```
    """

    component: ClassVar[str]
    namespace: ClassVar[str | None] = None
    sidecar: ClassVar[str | None] = None
    mode: ClassVar[str] = "mirror"
    durability: ClassVar[str] = "applied"
    # the count the query's checkpoint runs with (its spark.sql.shuffle.partitions):
    # declared, it is recorded with the state and checked (docs/concepts/identity.md)
    partitions: ClassVar[int | None] = None

    state: TaskState | Any

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Open the task's state (on executors only); override and call super().init."""
        self.handle = handle
        self.state = None
        ctx = TaskContext.get()
        if ctx is None:  # the driver's schema pass
            return
        self.state = TaskState(
            ctx,
            component=self.component,
            namespace=self.namespace,
            sidecar=self.sidecar,
            mode=self.mode,
            durability=self.durability,
            partitions=self.partitions,
        ).__enter__()

    def close(self) -> None:
        """Commit what changed; override and call super().close."""
        state, self.state = self.state, None
        if state is not None:
            state.__exit__(None, None, None)
