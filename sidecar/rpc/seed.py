"""The data source's writes: SeedBegin, SeedStage, SeedCommit, SeedAbort; and Settle.

`df.write.format("taskstate")` calls SeedBegin on the driver, SeedStage from each of its
Spark tasks and SeedCommit (or SeedAbort) on the driver again (storage/base.SeedStore
says what each promises). Settle finishes or undoes abandoned writes: the `taskstate`
commands and the data source's reads call it first. The call guard authorizes each by
its namespace, like every other call.
"""

from __future__ import annotations

import logging

from taskstate.proto import codes
from taskstate.proto import taskstate_pb2 as pb

from .. import metrics
from ..config import Limits
from ..errors import SidecarError
from ..storage.base import SeedStore
from ..storage.values import SeedSpec
from . import wire
from .wire import MAX_BATCH, MAX_PARTITIONS, bad

log = logging.getLogger("taskstate.sidecar")

DEFAULT_QUIET_S = 30.0  # as a rescale: refused while the component was written this recently
DEFAULT_LEASE_S = 60.0  # a write no call reached for this long is abandoned
MAX_LEASE_S = 24 * 3600.0


class SeedRpcs:
    """taskstate.v1.TaskStateService's calls of the data source's writes."""

    def __init__(self, store: SeedStore, limits: Limits) -> None:
        self.store = store
        self.limits = limits

    async def SeedBegin(self, request: pb.SeedBeginRequest) -> pb.SeedBeginResponse:  # noqa: N802
        """Hold the component and record the write."""
        ns, comp = _component(request.namespace, request.component)
        where = f"{ns}/{comp}"
        if not 1 <= request.partitions <= MAX_PARTITIONS:
            raise bad(f"{where}: partitions {request.partitions} is not a count between 1 and "
                      f"{MAX_PARTITIONS}")  # fmt: skip
        batch = request.batch if request.HasField("batch") else None
        if batch is not None and not -1 <= batch <= MAX_BATCH:
            raise bad(f"{where}: batch {batch} is out of range")
        quiet = request.quiet_seconds if request.HasField("quiet_seconds") else DEFAULT_QUIET_S
        lease = request.lease_seconds if request.HasField("lease_seconds") else DEFAULT_LEASE_S
        if not 0 < lease <= MAX_LEASE_S:
            raise bad(f"{where}: lease {lease} s is not between 0 and {MAX_LEASE_S:.0f} s")
        spec = SeedSpec(
            namespace=ns,
            component=comp,
            to=request.partitions,
            key_type=request.key_type or "string",
            overwrite=request.overwrite,
            batch=batch,
            quiet_s=max(0.0, quiet),
            lease_s=lease,
        )
        started = await self.store.begin(spec)
        return pb.SeedBeginResponse(
            seed_id=started.seed_id, settled=started.settled, batch=started.batch
        )

    async def SeedStage(self, request: pb.SeedStageRequest) -> pb.SeedStageResponse:  # noqa: N802
        """Stage one page of a Spark task's keys."""
        ns, comp = _component(request.namespace, request.component)
        if request.source < 0 or request.attempt < 0:
            raise bad(f"{ns}/{comp}: source and attempt are Spark's partition and attempt")
        flat = wire.seed_page(request.packed, ns, comp, self.limits)
        n = await self.store.stage(ns, comp, request.seed_id, request.source, request.attempt, flat)
        metrics.SEED_KEYS.inc(n)
        return pb.SeedStageResponse(keys=n)

    async def SeedCommit(self, request: pb.SeedCommitRequest) -> pb.SeedCommitResponse:  # noqa: N802
        """Make the write visible."""
        ns, comp = _component(request.namespace, request.component)
        sources = {s.source: s.attempt for s in request.sources}
        try:
            done = await self.store.commit(ns, comp, request.seed_id, sources)
        except SidecarError as exc:
            if exc.code == codes.INVALID_ARGUMENT:
                metrics.SEEDS.labels("refused").inc()
            raise
        metrics.SEEDS.labels("committed").inc()
        return pb.SeedCommitResponse(tasks=done.tasks, keys=done.keys, batch=done.batch)

    async def SeedAbort(self, request: pb.SeedAbortRequest) -> pb.SeedAbortResponse:  # noqa: N802
        """Undo the write."""
        ns, comp = _component(request.namespace, request.component)
        undone = await self.store.abort(ns, comp, request.seed_id)
        if undone:
            metrics.SEEDS.labels("aborted").inc()
        return pb.SeedAbortResponse(undone=undone)

    async def Settle(self, request: pb.SettleRequest) -> pb.SettleResponse:  # noqa: N802
        """Finish or undo the namespace's abandoned writes; say what was done."""
        ns, comp = wire.scope(request.namespace, request.component)
        notes = await self.store.settle(ns, comp)
        if notes:
            metrics.SEEDS.labels("settled").inc(len(notes))
        return pb.SettleResponse(settled=notes)


def _component(namespace: str, component: str) -> tuple[str, str]:
    ns, comp = wire.scope(namespace, component)
    if comp is None:
        raise bad(f"{ns}: a write of the data source needs a component")
    return ns, comp
