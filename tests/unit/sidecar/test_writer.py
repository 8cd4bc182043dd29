"""The last writer a task's metadata records (taskstate ls, show)."""

from __future__ import annotations

from taskstate.proto import taskstate_pb2 as pb
from taskstate.sidecar.rpc.wire import writer


def test_an_executor_id_is_recorded_and_none_is_left_out() -> None:
    w = pb.Writer(host="h1", executor="3", attempt=17, pid=42)
    assert writer(w) == "host=h1 executor=3 attempt=17 pid=42"
    # Spark's local mode gives its Python workers no SPARK_EXECUTOR_ID: no "executor= "
    w.executor = ""
    assert writer(w) == "host=h1 attempt=17 pid=42"
