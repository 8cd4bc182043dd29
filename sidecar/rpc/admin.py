"""The operators' calls: List, Drop, Adopt, Rescale, Edit, Import, Doctor (reads: read.py).

None claims a task. The call guard (guard.py) counts, limits, authorizes and maps errors
around each; the changes they make are logged at warning, for the audit trail.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from taskstate.proto import taskstate_pb2 as pb

from ..auth import visible
from ..config import Limits
from ..storage.base import AdminStore, SeedStore, TaskStore
from ..storage.values import TaskKey
from ..sweeper import sweep_task
from . import wire
from .guard import current_grant
from .wire import MAX_BATCH, MAX_PARTITIONS, bad

log = logging.getLogger("taskstate.sidecar")

DEFAULT_QUIET_S = 30.0  # a rescale refuses a component written more recently than this
DEFAULT_IDLE_S = 60.0  # a sweep leaves alone a task opened or written this recently


class AdminRpcs:
    """taskstate.v1.TaskStateService's operator calls over an AdminStore."""

    def __init__(
        self,
        store: AdminStore,
        tasks: TaskStore,
        seeds: SeedStore,
        limits: Limits,
        redis_url: str,
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.seeds = seeds  # a rescale first settles an abandoned write of the component
        self.limits = limits
        self.redis_url = redis_url  # redacted, for Doctor

    async def List(self, request: pb.ListRequest) -> pb.ListResponse:  # noqa: N802
        """The namespaces (those the caller's token may see), or one namespace's tasks."""
        if not request.namespace and not request.component:
            names = await self.store.namespaces()
            return pb.ListResponse(namespaces=visible(current_grant(), names))
        ns, comp = wire.scope(request.namespace, request.component)
        metas = await self.store.list_tasks(ns, comp)
        return pb.ListResponse(tasks=[wire.task_info(m) for m in metas])

    async def Drop(self, request: pb.DropRequest) -> pb.DropResponse:  # noqa: N802
        """Delete a namespace's, a component's or a task's state."""
        ns, comp = wire.scope(request.namespace, request.component)
        part: int | None = None
        if request.HasField("partition"):
            if comp is None:
                raise bad("Drop with a partition needs a component")
            part = wire.partition(request.partition)
        n = await self.store.drop(ns, comp, part)
        log.warning(
            "state dropped",
            extra={"namespace": ns, "component": comp, "partition": part, "tasks": n},
        )
        return pb.DropResponse(tasks_dropped=n)

    async def Adopt(self, request: pb.AdoptRequest) -> pb.AdoptResponse:  # noqa: N802
        """Record that the namespace's query goes on from the batch it runs next."""
        ns, _ = wire.scope(request.namespace, "")
        known, tasks = await self.store.adopt(ns)
        log.warning(
            "namespace adopted: its query goes on from the batch it runs next",
            extra={"namespace": ns, "known_before": known, "tasks": tasks},
        )
        return pb.AdoptResponse(known_before=known, tasks=tasks)

    async def Rescale(self, request: pb.RescaleRequest) -> AsyncIterator[pb.RescaleProgress]:  # noqa: N802
        """Move a component's keys to another partition count, streaming the progress."""
        ns, comp = wire.scope(request.namespace, request.component)
        if comp is None:
            raise bad("Rescale needs a component: NAMESPACE/COMPONENT")
        if not 1 <= request.to <= MAX_PARTITIONS:
            raise bad(f"{ns}/{comp}: --to {request.to} is not a partition count "
                      f"between 1 and {MAX_PARTITIONS}")  # fmt: skip
        quiet = DEFAULT_QUIET_S
        if request.HasField("quiet_seconds"):
            quiet = max(0.0, request.quiet_seconds)
        key_type = request.key_type or "string"
        await self.seeds.settle(ns, comp)
        log.warning(
            "rescale started",
            extra={"namespace": ns, "component": comp, "to": request.to, "key_type": key_type},
        )
        async for step in self.store.rescale(ns, comp, request.to, key_type, quiet):
            if step.phase == "done":
                log.warning(
                    "rescale done",
                    extra={"namespace": ns, "component": comp, "from": step.from_partitions,
                           "to": step.to_partitions, "keys": step.keys, "batch": step.batch},
                )  # fmt: skip
            yield pb.RescaleProgress(
                phase=step.phase,
                done=step.done,
                total=step.total,
                from_partitions=step.from_partitions,
                to_partitions=step.to_partitions,
                keys=step.keys,
                batch=step.batch,
                resumed=step.resumed,
            )

    async def Edit(self, request: pb.EditRequest) -> pb.EditResponse:  # noqa: N802
        """Set or delete one key of a task, or delete it from every task of a component."""
        ns, comp = wire.scope(request.namespace, request.component)
        if comp is None:
            raise bad("Edit needs a component")
        if not request.key:
            raise bad(f"{ns}/{comp}: Edit needs a key")
        value = None if request.delete else bytes(request.value)
        if value is not None and not value:
            raise bad(f"{ns}/{comp}: key {request.key[:80]!r} has an empty encoded value")
        codec = request.codec or "json"
        if request.HasField("partition"):
            tasks = [TaskKey(ns, comp, wire.partition(request.partition))]
        elif request.delete:
            tasks = [m.task for m in await self.store.list_tasks(ns, comp)]
        else:
            raise bad(f"{ns}/{comp}: setting a key needs the task's partition")
        had = 0
        for task in tasks:
            had += await self.store.edit(task, request.key, value, codec)
        log.warning(
            "state edited by an operator",
            extra={"namespace": ns, "component": comp, "tasks": len(tasks),
                   "had_key": had, "delete": request.delete},
        )  # fmt: skip
        return pb.EditResponse(tasks=len(tasks), had_key=had)

    async def Import(self, request: pb.ImportRequest) -> pb.ImportResponse:  # noqa: N802
        """Create (or extend) a task from exported state."""
        task = wire.task_key(request.task)
        entries = [(e.key, e.value) for e in request.entries]
        empty = next((k for k, v in entries if not v), None)
        if empty is not None:
            raise bad(f"task {task.fq}: key {empty[:80]!r} has an empty encoded value")
        self.limits.check_entries(
            task.fq, [k for k, _ in entries], [v for _, v in entries], "import"
        )
        codec = wire.codec(request.codec, task.fq)
        if not -1 <= request.committed_batch <= MAX_BATCH:
            raise bad(f"task {task.fq}: committed batch {request.committed_batch} is out of range")
        if not 0 <= request.partitions <= MAX_PARTITIONS:
            raise bad(f"task {task.fq}: partitions {request.partitions} is out of range")
        epoch, size = await self.store.import_task(
            task,
            entries,
            committed_batch=request.committed_batch,
            position=request.position if request.has_position else None,
            codec=codec,
            replace=request.replace,
            append_epoch=wire.epoch(request.epoch, task.fq) if request.append else None,
            partitions=request.partitions or None,
        )
        log.warning(
            "state imported",
            extra={"task": task.fq, "keys": len(entries), "append": request.append},
        )
        return pb.ImportResponse(epoch=epoch, size=size)

    async def Sweep(self, request: pb.SweepRequest) -> pb.SweepResponse:  # noqa: N802
        """Delete the expired keys of the scope's idle tasks (sweeper.py)."""
        ns, comp = wire.scope(request.namespace, request.component)
        idle = request.idle_seconds if request.HasField("idle_seconds") else DEFAULT_IDLE_S
        tasks = await self.store.list_tasks(ns, comp)
        keys = 0
        for t in tasks:
            keys += await sweep_task(self.store, t.task, max(0.0, idle))
        return pb.SweepResponse(tasks=len(tasks), keys=keys)

    async def Doctor(self, request: pb.DoctorRequest) -> pb.DoctorResponse:  # noqa: N802
        """What the sidecar sees of its store, and whether a durability is possible there."""
        durability = wire.durability(request.durability, request.replicas, "doctor")
        r = await self.store.doctor(durability)
        return pb.DoctorResponse(
            topology=r.topology,
            redis_url=self.redis_url,
            servers=[
                pb.ServerReport(
                    address=s.address,
                    role=s.role,
                    version=s.version,
                    aof_enabled=s.aof_enabled,
                    appendfsync=s.appendfsync,
                    connected_replicas=s.connected_replicas,
                )
                for s in r.servers
            ],
            checks=[pb.Check(name=c.name, ok=c.ok, detail=c.detail) for c in r.checks],
        )
