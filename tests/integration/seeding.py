"""A data-source write's three calls (SeedBegin, SeedStage, SeedCommit) as the data source
makes them, through the public AdminClient, for component "c"."""

from __future__ import annotations

import json
from typing import Any

import msgpack

from taskstate.client.admin import AdminClient
from taskstate.proto import taskstate_pb2 as pb


def begin(admin: AdminClient, ns: str, to: int, **kw: Any) -> pb.SeedBeginResponse:
    req = pb.SeedBeginRequest(namespace=ns, component="c", partitions=to, key_type="string", **kw)
    return admin.seed_begin(req)


def stage(
    admin: AdminClient, ns: str, seed: str, source: int, attempt: int, pairs: dict[str, Any]
) -> int:
    flat = [x for k, v in pairs.items() for x in (k, json.dumps(v))]
    req = pb.SeedStageRequest(namespace=ns, component="c", seed_id=seed, source=source,
                              attempt=attempt, packed=msgpack.packb(flat))  # fmt: skip
    return admin.seed_stage(req)


def commit(admin: AdminClient, ns: str, seed: str, sources: dict[int, int]) -> Any:
    req = pb.SeedCommitRequest(namespace=ns, component="c", seed_id=seed, sources=[
        pb.SeedSource(source=s, attempt=a) for s, a in sources.items()])  # fmt: skip
    return admin.seed_commit(req)
