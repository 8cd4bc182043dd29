"""`taskstate rescale`: move a component's keys to another partition count.

Spark's hash partitioning sends key k to partition `pmod(murmur3(k), n)` (spark_hash.py),
so a job run with another n finds each key's state in the wrong task. A rescale moves
every key of every task of the component to the task that n gives it, in four phases
recorded in the namespace's record (`rescale/<comp>`, JSON), so that a run killed at
any point is finished by the next run with the same arguments:

1. plan: refuse if a task was written in the last `quiet_s` seconds (a running query),
   check every key can be read as the key type, and record the plan: its sources (the
   indexed tasks), the committed batch to keep (the highest of the sources') and
   whether that batch's rollback records are complete (then they move too, key by key,
   and a replay of the batch after the rescale rolls back exactly what it changed).
2. lock (lua/rescale_lock.lua): each source's epoch goes up and Open refuses it
   (TSRESCALING) until it is written; new tasks are refused by the record itself.
3. copy: every source's data (and rollback record) into staging hashes beside each
   target (`stage`, `stage_undo`, same slot). Only reads the sources, so it starts
   again from scratch when resumed.
4. commit (lua/rescale_commit.lua): each target takes its staging hashes in one atomic
   step, with a new generation at the kept batch and the new count. Written targets
   are marked, so a resumed commit phase skips them; then the sources beyond the new
   count are deleted (lua/rescale_retire.lua) and the record says the new count.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import redis.exceptions as rex

from taskstate.proto import codes
from taskstate.proto.ids import fq_task_id
from taskstate.proto.versions import new_generation

from ... import errors
from ...errors import SidecarError
from ...placement import partitions_of
from ...spark_hash import KEY_TYPES, partition_of
from ..values import RescaleProgress, TaskKey
from . import meta
from .keys import (
    component_fields,
    edits_key,
    every_key,
    namespace_key,
    seed_fields,
    task_key,
    task_keys,
    ttl_key,
)
from .records import NamespaceRecords
from .replies import text
from .routing import Connection
from .scan import Scanner, ServerChangedError
from .scripts import Refused, refusal

PAGE = 2000  # fields per HSCAN page and per staging write


@dataclass
class Plan:
    """A rescale under way, as the namespace's record keeps it."""

    id: str
    to: int
    key_type: str
    sources: list[int]
    from_count: int
    codec: str
    batch: int = -1  # the committed batch the targets keep (set in the copy phase)
    prev: int | None = None  # the batch before it (None: no complete rollback record)
    phase: str = "lock"
    keys: int = 0
    started: float = field(default_factory=time.time)

    @property
    def lock(self) -> str:
        """The value a held task's metadata carries (lua/rescale_lock.lua)."""
        return f"{self.id}:{self.to}"


class Rescaler:
    """A component's move to another partition count, on one Redis connection."""

    def __init__(self, conn: Connection, records: NamespaceRecords, scanner: Scanner) -> None:
        self._conn = conn
        self._records = records
        self._scanner = scanner

    async def run(
        self, namespace: str, component: str, to: int, key_type: str, quiet_s: float
    ) -> AsyncIterator[RescaleProgress]:
        """See base.AdminStore.rescale."""
        if key_type not in KEY_TYPES:
            raise errors.bad_argument(f"key type {key_type!r} is not one of {', '.join(KEY_TYPES)}")
        if to < 1:
            raise errors.bad_argument(f"--to {to}: a partition count is at least 1")
        record = namespace_key(namespace)
        parts_field, plan_field = component_fields(component)
        client = self._conn.client
        seed_field = seed_fields(component)[0]
        raw, seed = await self._conn.run(
            "rescale", lambda: client.hmget(record, plan_field, seed_field)
        )
        if seed is not None:  # a write of the data source holds it
            raise errors.seeding(f"{namespace}/{component}")
        resumed = raw is not None
        if raw is not None:
            plan = Plan(**json.loads(text(raw)))
            if (plan.to, plan.key_type) != (to, key_type):
                raise SidecarError(
                    codes.PARTITIONS,
                    f"{namespace}/{component}: a rescale to {plan.to} partitions (key type "
                    f"{plan.key_type}) is under way and has not finished. Nothing was "
                    f"changed. Finish it first: `taskstate rescale {namespace}/{component} "
                    f"--to {plan.to} --key-type {plan.key_type}`.",
                )
        else:
            made = await self._plan(namespace, component, to, key_type, quiet_s)
            if made is None:  # nothing would move
                n = await self._records.recorded(namespace, component)
                yield RescaleProgress("done", from_partitions=n or to, to_partitions=to)
                return
            plan = made
            await self._save(namespace, component, plan)
        yield RescaleProgress(
            "plan",
            total=len(plan.sources),
            from_partitions=plan.from_count,
            to_partitions=to,
            batch=plan.batch,
            resumed=resumed,
        )
        if plan.phase == "lock":
            for i, p in enumerate(plan.sources):
                task = TaskKey(namespace, component, p)
                lock, now = plan.lock, f"{time.time():.3f}"
                await self._script("rescale_lock", task, task_keys(task)[:1], lock=lock, now=now)
                yield RescaleProgress("lock", i + 1, len(plan.sources))
            plan.phase = "copy"
            await self._save(namespace, component, plan)
        if plan.phase == "copy":
            async for step in self._copy(namespace, component, plan):
                yield step
            plan.phase = "commit"
            await self._save(namespace, component, plan)
        if plan.phase == "commit":
            gen = new_generation()
            for t in range(to):
                task = TaskKey(namespace, component, t)
                keys = (*task_keys(task), *_staging(task), edits_key(task), ttl_key(task))
                await self._script(
                    "rescale_commit",
                    task,
                    keys,
                    lock=plan.lock,
                    partitions=str(to),
                    batch=str(plan.batch),
                    prev_batch="" if plan.prev is None else str(plan.prev),
                    new_gen=gen,
                    now=f"{time.time():.3f}",
                    codec=plan.codec,
                )
                await self._records.index(task)
                yield RescaleProgress("commit", t + 1, to)
            plan.phase = "retire"
            await self._save(namespace, component, plan)
        gone = [p for p in plan.sources if p >= to]
        for i, p in enumerate(gone):
            task = TaskKey(namespace, component, p)
            await self._script("rescale_retire", task, every_key(task), lock=plan.lock)
            await self._records.unindex(task)
            yield RescaleProgress("retire", i + 1, len(gone))

        async def finish() -> Any:
            pipe = client.pipeline(transaction=True)  # one key: one slot
            pipe.hset(record, parts_field, str(to))
            pipe.hdel(record, plan_field)
            return await pipe.execute()

        await self._conn.run("rescale", finish)
        yield RescaleProgress(
            "done",
            from_partitions=plan.from_count,
            to_partitions=to,
            keys=plan.keys,
            batch=plan.batch,
            resumed=resumed,
        )

    # -- the phases ----------------------------------------------------------------

    async def _plan(
        self, namespace: str, component: str, to: int, key_type: str, quiet_s: float
    ) -> Plan | None:
        sources = [t.partition for t in await self._records.members(namespace, component)]
        if not sources:
            raise SidecarError(
                codes.NOT_FOUND,
                f"{namespace}/{component}: no tasks with state (`taskstate ls {namespace}` "
                "lists the components). Nothing was changed.",
            )
        await meta.refuse_if_running(self._conn, namespace, component, sources, quiet_s, "rescale")
        metas = await self._metas(namespace, component, sources)
        for p, m in metas.items():
            if m["stash_batch"] is not None:  # lua/open.lua: restored by the next batch
                fq = TaskKey(namespace, component, p).fq
                raise errors.finished_batch_aside(fq, m["stash_batch"], "rescale")
        codecs = {m["codec"] for m in metas.values() if m["codec"]}
        if len(codecs) > 1:
            raise errors.corrupt(
                f"{namespace}/{component}", f"its tasks use codecs {sorted(codecs)}"
            )
        recorded = await self._records.recorded(namespace, component)
        counts = {int(m["partitions"]) for m in metas.values() if m["partitions"]}
        from_count = recorded or (max(counts) if counts else max(sources) + 1)
        if from_count == to and max(sources) < to:
            return None
        if key_type != "string":
            await self._check_keys(namespace, component, sources, to, key_type)
        return Plan(
            id=uuid.uuid4().hex[:12],
            to=to,
            key_type=key_type,
            sources=sorted(sources),
            from_count=from_count,
            codec=codecs.pop() if codecs else "json",
        )

    async def _metas(
        self, namespace: str, component: str, sources: Sequence[int]
    ) -> dict[int, dict[str, str | None]]:
        """What the plan reads of each source's metadata."""
        fields = ("batch", "undo_batch", "prev_batch", "codec", "partitions", "stash_batch")
        return await meta.fields(self._conn, namespace, component, sources, fields)

    async def _batch(self, namespace: str, component: str, plan: Plan) -> None:
        """The batch the targets keep, and whether its rollback records are complete.

        Read once the sources are held, so no commit can land after it.
        """
        metas = await self._metas(namespace, component, plan.sources)
        plan.batch = max(int(m["batch"] or -1) for m in metas.values())
        at_batch = [m for m in metas.values() if int(m["batch"] or -1) == plan.batch]
        plan.prev = None
        if plan.batch >= 0 and all(m["undo_batch"] == str(plan.batch) for m in at_batch):
            plan.prev = max(int(m["prev_batch"] or -1) for m in at_batch)

    async def _check_keys(
        self, namespace: str, component: str, sources: Sequence[int], to: int, key_type: str
    ) -> None:
        """Every key must read as the key type: checked before anything is written."""
        for p in sources:
            data = task_keys(TaskKey(namespace, component, p))[1]
            async for page in self._pages(data):
                for k in page:
                    try:
                        partition_of(text(k), to, key_type)
                    except ValueError as exc:
                        raise errors.bad_argument(
                            f"{fq_task_id(namespace, component, p)}: key {text(k)[:80]!r} "
                            f"cannot be read as a {key_type} ({exc}). Nothing was changed. "
                            "Give the --key-type of the column the job partitions by."
                        ) from None

    async def _copy(
        self, namespace: str, component: str, plan: Plan
    ) -> AsyncIterator[RescaleProgress]:
        await self._batch(namespace, component, plan)
        targets = [TaskKey(namespace, component, t) for t in range(plan.to)]
        await self._unlink([k for t in targets for k in _staging(t)])
        moved = 0
        for n, p in enumerate(plan.sources):
            src = TaskKey(namespace, component, p)
            data = task_keys(src)[1]
            async for page in self._pages(data):
                moved += len(page)
                await self._route(targets, page, 0, plan)
            if plan.prev is not None:
                async for page in self._undo_fields(src, plan.batch):
                    await self._route(targets, page, 1, plan)
            yield RescaleProgress("copy", n + 1, len(plan.sources), keys=moved)
        plan.keys = moved

    async def _undo_fields(self, task: TaskKey, batch: int) -> AsyncIterator[dict[Any, Any]]:
        """The task's rollback record of `batch` as key -> value before it ('': absent).

        Nothing if the task's record is of another batch (it did not write `batch`). A
        fields-mode record is that already; a copy-mode record is the whole data before
        the batch, so the keys it lacks that the data has were created by the batch.
        """
        meta, data, undo, _ = task_keys(task)
        client = self._conn.client
        undo_batch, mode = await self._conn.run(
            "rescale", lambda: client.hmget(meta, "undo_batch", "undo_mode")
        )
        if text(undo_batch) != str(batch):
            return
        async for page in self._pages(undo):
            yield page
        if text(mode) != "copy":
            return
        async for page in self._pages(data):
            keys = list(page)
            _, present = await self._conn.send(undo, [("HEXISTS", undo, k) for k in keys])
            created = {k: b"" for k, there in zip(keys, present, strict=True) if not there}
            if created:
                yield created

    async def _route(
        self, targets: Sequence[TaskKey], page: dict[Any, Any], which: int, plan: Plan
    ) -> None:
        """Write one page of a source's hash to the targets' staging hashes."""
        by_target: dict[int, list[Any]] = defaultdict(list)
        try:
            placed = partitions_of([text(k) for k in page], plan.to, plan.key_type)
        except ValueError as exc:  # a key written after the plan checked them all
            raise errors.bad_argument(
                f"a key cannot be read as a {plan.key_type} ({exc}); the rescale holds the "
                "component and has written nothing to its tasks yet: delete the key "
                "(`taskstate erase`) and run the same rescale again"
            ) from None
        for t, (k, v) in zip(placed, page.items(), strict=True):
            by_target[t] += (k, v)

        async def write(t: int, flat: list[Any]) -> None:
            key = _staging(targets[t])[which]
            _, replies = await self._conn.send(key, [("HSET", key, *flat)])
            for r in replies:
                if isinstance(r, Exception):
                    raise r

        # the targets' writes overlap: one round trip per page, not one per target
        await asyncio.gather(*(write(t, flat) for t, flat in by_target.items()))

    # -- helpers -------------------------------------------------------------------

    async def _pages(self, key: str) -> AsyncIterator[dict[Any, Any]]:
        try:
            async for page in self._scanner.pages(key, PAGE, None, "rescale"):
                yield page
        except ServerChangedError:
            raise SidecarError(
                codes.STORAGE_UNAVAILABLE,
                f"{key}: the Redis server holding it changed during the rescale (a failover "
                "or slot migration). Run the same `taskstate rescale` again when it is over: "
                "it goes on where it stopped.",
            ) from None

    async def _script(self, name: str, task: TaskKey, keys: Sequence[str], **args: str) -> Any:
        argv = self._conn.scripts[name].args(**args)

        async def call() -> Any:
            return await self._conn.evalsha(name, keys, argv)

        try:
            return await self._conn.run("rescale", call)
        except rex.ResponseError as exc:
            raise refusal(exc, Refused(task.fq, name)) from None

    async def _unlink(self, keys: Sequence[str]) -> None:
        for k in keys:  # one slot each
            await self._redis("UNLINK", k)

    async def _redis(self, *command: Any) -> Any:
        """One command on the key it names (command[1]), with the backend's retries."""

        async def call() -> Any:
            return await self._conn.client.execute_command(*command)

        return await self._conn.run("rescale", call)

    async def _save(self, namespace: str, component: str, plan: Plan) -> None:
        record, blob = namespace_key(namespace), json.dumps(asdict(plan))
        field_ = component_fields(component)[1]
        await self._conn.run("rescale", lambda: self._conn.client.hset(record, field_, blob))


def _staging(task: TaskKey) -> tuple[str, str]:
    """(stage, stage_undo): a rescale's new data and rollback record for a target."""
    n, c, p = task.namespace, task.component, task.partition
    return task_key(n, c, p, "stage"), task_key(n, c, p, "stage_undo")
