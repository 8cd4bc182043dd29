"""The data source's read of one task against a real sidecar: one version, or read again.

Spark is not needed to show it: `read()` of the data source's reader is called as a
Spark task would call it. A commit lands between two chunks of the first read, while the
sidecar is still scanning (the values are large enough for gRPC's flow control to hold
it back): that read must not give a row (it was spilled, not yielded), and the read again
gives exactly the committed state after that commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from taskstate.client import LocalContext, TaskState
from taskstate.client.admin import AdminClient
from taskstate.spark_plugin.datasource.connect import client_for
from taskstate.spark_plugin.datasource.options import Options
from taskstate.spark_plugin.datasource.pushdown import PushdownReader
from taskstate.spark_plugin.datasource.read import TaskPartition
from taskstate.testing import SidecarProcess

pytestmark = pytest.mark.integration
PAD = "x" * 2000


def test_a_commit_mid_read_is_never_half_seen(
    sidecar: SidecarProcess, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s.update({f"k{i}": {"v": 0, "pad": PAD} for i in range(9000)})  # about 18 MB
    real = AdminClient.read_chunks
    chunks_seen: list[int] = []

    def commit_after_the_first_chunk(self: AdminClient, request: Any) -> Iterator[Any]:
        for n, chunk in enumerate(real(self, request)):
            assert chunk.last or chunk.packed, "a chunk with no keys before the last"
            chunks_seen.append(n)
            if len(chunks_seen) == 1:  # the first read, after its first chunk
                with TaskState(LocalContext(0, batch_id=1), component="c",
                               namespace=namespace, sidecar=sidecar.target) as s:  # fmt: skip
                    s.update({f"k{i}": {"v": 1, "pad": PAD} for i in range(9000)})
                    s["new"] = {"v": 1, "pad": PAD}
            yield chunk

    monkeypatch.setattr(AdminClient, "read_chunks", commit_after_the_first_chunk)
    options = Options.parse(
        {"namespace": namespace, "component": "c", "sidecar": sidecar.target}, writing=False
    )
    rows = [r for b in PushdownReader(options).read(TaskPartition(0)) for r in b.to_pylist()]
    assert client_for(options).rereads == 1  # the first read met the commit: read again
    assert {r["batch"] for r in rows} == {1}
    want = {f"k{i}": {"v": 1, "pad": PAD} for i in range(9000)}
    assert {r["key"]: json.loads(r["value"]) for r in rows} == {**want, "new": {"v": 1, "pad": PAD}}
