"""The examples in the public docstrings (the API reference shows them) run as written.

A real sidecar and redis-server. Outside Spark, `TaskContext.get()` is None, so the
TaskState example runs with the LocalContext its docstring names instead; the
AdminClient example then reads what that example wrote. The Spark-side examples
(configure, with_batch_id, resume, TaskStateProcessor) need a SparkSession: the jobs of
tests/e2e run those patterns whole.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any

import pytest

from taskstate.client import LocalContext, TaskState
from taskstate.client.admin import AdminClient
from taskstate.testing import SidecarProcess

pytestmark = pytest.mark.integration


def example(obj: Any) -> str:
    """The ```python block of `obj`'s docstring, unindented."""
    (block,) = re.findall(r"```python\n(.*?)```", inspect.getdoc(obj) or "", re.DOTALL)
    return textwrap.dedent(str(block))


def test_the_taskstate_and_adminclient_examples_run_as_written(
    sidecar: SidecarProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKSTATE_SIDECAR", sidecar.target)
    monkeypatch.setenv("TASKSTATE_NAMESPACE", "shop-totals")
    code = example(TaskState).replace("TaskContext.get()", "LocalContext(3, batch_id=None)")
    assert "TaskContext.get()" in example(TaskState)
    exec(code, {"TaskState": TaskState, "LocalContext": LocalContext})  # noqa: S102

    admin_code = example(AdminClient).replace(
        '"unix:///tmp/taskstate-run/sidecar.sock"', repr(sidecar.target)
    )
    admin_code = admin_code.replace("shop-totals/running-totals/3", "shop-totals/hashtag-ewma/3")
    printed: list[Any] = []
    scope = {"AdminClient": AdminClient, "print": printed.append}
    exec(admin_code, scope)  # noqa: S102
    assert len(printed) == 1 and "hashtag-ewma" in str(printed[0])
    assert scope["values"] == {"#spark": b'{"rate":1.7,"last":12}'}
