"""A component's state written from a Spark DataFrame (`df.write.format("taskstate")`).

All or nothing, like Spark's own file commit protocol: staged where no query looks, made
visible once Spark commits the write job, undone otherwise. The plan lives in the
namespace's record (`seed/<comp>`, JSON, and `seed_alive/<comp>`: when a call of the
write last reached a sidecar), so any sidecar serves any step and the next one finishes
or undoes a write whose job died:

1. begin (the driver, `DataSource.writer`): refused while the component's query runs (no
   task opened or written in `quiet_s`) or while a rescale or another write holds it; an
   append into a component of another partition count is refused. The component's
   tasks, and one placeholder per task the write creates, are held (lua/seed_lock.lua):
   Open, reads and edits refuse them until the write ends.
2. stage (every Spark task of the write): a page of keys, each placed where Spark's
   `repartition(n, "key")` sends it (placement.py), into a hash of that attempt of the
   Spark task, beside its target task (one pipeline, no script: the task must still be
   held by the write, and a key this attempt staged before is a duplicate).
3. commit (the driver, `DataSourceWriter.commit`, with Spark's commit messages): per task,
   the hashes of the attempts that count are merged (lua/seed_merge.lua: a key in two
   of them is a duplicate, and the write is undone), the other attempts' hashes (of
   Spark tasks that failed and ran again) dropped; then per task in one step each
   (lua/seed_publish.lua) the merged keys become its state, at the write's batch, with
   the partition count, a new generation and no rollback record. Tasks beyond the count
   go (overwrite), the count is recorded, the plan is removed.
4. abort or settle: undo (lua/seed_undo.lua) drops what was staged and releases the tasks.
   A write whose calls stopped for longer than its lease is abandoned: `settle` (run by
   Open, by `taskstate` commands and by the next write) undoes it, or, when it had reached
   the publish phase, finishes it, and says which.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis.exceptions as rex

from taskstate.proto import codes
from taskstate.proto.versions import new_generation

from ... import errors
from ...errors import SidecarError
from ...placement import partitions_of
from ...spark_hash import KEY_TYPES
from ..values import SeedDone, SeedSpec, SeedStarted, TaskKey
from . import meta
from .keys import (
    edits_key,
    every_key,
    seed_key,
    seed_keys,
    stash_key,
    task_keys,
    ttl_key,
)
from .records import NamespaceRecords
from .replies import fields, text
from .routing import Connection
from .scripts import SEED_LOCK, Refused, refusal
from .seed_plans import SeedPlan, SeedPlans, now

log = logging.getLogger("taskstate.sidecar.seed")

MERGE_SOURCES = 100  # staging hashes merged by one call of seed_merge.lua
STAGE_TTL_S = 7 * 24 * 3600  # what a write staged outlives its write at most this long


class Seeder:
    """Writes of the data source (base.SeedStore) on one Redis connection."""

    def __init__(self, conn: Connection, records: NamespaceRecords) -> None:
        self._conn = conn
        self._records = records
        self._plans = SeedPlans(conn)

    async def begin(self, spec: SeedSpec) -> SeedStarted:
        """Hold the component and record the plan; see the module docstring."""
        ns, comp = spec.namespace, spec.component
        if spec.key_type not in KEY_TYPES:
            raise errors.bad_argument(
                f"{ns}/{comp}: key type {spec.key_type!r} cannot be placed by Spark's hash "
                f"partitioning here; the key column must be one of {', '.join(KEY_TYPES)}"
            )
        settled = await self.settle(ns, comp)
        recorded, rescaling, seeding = await self._plans.component(ns, comp)
        if rescaling:
            raise SidecarError(
                codes.PARTITIONS,
                f"{ns}/{comp}: a `taskstate rescale` holds it and has not finished. Nothing "
                "was written. Finish the rescale (run it again with its --to), then write.",
            )
        if seeding:
            raise errors.seeding(f"{ns}/{comp}")
        existing = [t.partition for t in await self._records.members(ns, comp)]
        if existing and not spec.overwrite:
            count = recorded if recorded is not None else max(existing) + 1
            if count != spec.to and (recorded is not None or max(existing) >= spec.to):
                raise SidecarError(
                    codes.PARTITIONS,
                    f"{ns}/{comp} is split into {count} partitions, and the write places its "
                    f"keys by {spec.to}. Nothing was written. Write with partitions={count} to "
                    "add to it, mode overwrite to replace it, or `taskstate rescale "
                    f"{ns}/{comp} --to {spec.to}` first.",
                )
        await meta.refuse_if_running(
            self._conn, ns, comp, existing, spec.quiet_s, "write its state"
        )
        batch = await self._batch(spec, existing)
        plan = SeedPlan(
            id=uuid.uuid4().hex[:12],
            to=spec.to,
            key_type=spec.key_type,
            overwrite=spec.overwrite,
            batch=batch,
            existing=existing,
            lease_s=spec.lease_s,
        )
        if not await self._plans.claim(ns, comp, plan):
            raise errors.seeding(f"{ns}/{comp}")
        try:
            for p in plan.held:
                task = TaskKey(ns, comp, p)
                await self._script(
                    "seed_lock", task, task_keys(task)[:1], lock=plan.lock, now=now()
                )
        except BaseException:
            await self._undo(ns, comp, plan)
            raise
        log.warning(
            "data source write begun",
            extra={"namespace": ns, "component": comp, "seed": plan.id, "to": plan.to,
                   "overwrite": plan.overwrite, "batch": batch},
        )  # fmt: skip
        return SeedStarted(plan.id, batch, settled)

    async def stage(
        self, namespace: str, component: str, seed_id: str, source: int, attempt: int,
        flat: Sequence[str],
    ) -> int:  # fmt: skip
        """Stage one page of keys of Spark task `source` (attempt `attempt`)."""
        plan = await self._plans.current(namespace, component, seed_id)
        if plan.phase != "stage":
            raise errors.seed_gone(namespace, component, seed_id)
        keys = flat[0::2]
        try:
            targets = partitions_of(keys, plan.to, plan.key_type)
        except ValueError as exc:
            raise errors.bad_argument(
                f"{namespace}/{component}: a key cannot be read as a {plan.key_type} ({exc}); "
                "nothing of the write is visible"
            ) from None
        by_target: dict[int, list[str]] = defaultdict(list)
        for t, k, v in zip(targets, keys, flat[1::2], strict=True):
            by_target[t] += (k, v)

        async def one(t: int, pairs: list[str]) -> None:
            task = TaskKey(namespace, component, t)
            meta, att = task_keys(task)[0], seed_keys(task, seed_id)[1]
            mine = f"{source}.{attempt}"
            stage = seed_key(task, seed_id, mine)
            # one round trip, no script: the attempt's own hash (a retry of the Spark task
            # writes another; commit takes the attempt Spark kept), its keys asked first
            _, (held, _, had, _, _) = await self._conn.send(
                stage,
                [("HGET", meta, "rescale"), ("SADD", att, mine), ("HMGET", stage, *pairs[0::2]),
                 ("HSET", stage, *pairs), ("EXPIRE", stage, STAGE_TTL_S)],
            )  # fmt: skip
            if text(held) != plan.lock:  # undone meanwhile: what it wrote expires unused
                if held is None or isinstance(held, Exception):
                    raise errors.seed_gone(namespace, component, seed_id)
                raise errors.seeding(task.fq)
            if isinstance(had, Exception):
                raise had
            twice = next((k for k, v in zip(pairs[0::2], had, strict=True) if v is not None), None)
            if twice is not None:  # this attempt staged the key before
                raise errors.seed_duplicate(namespace, component, twice)

        try:
            await asyncio.gather(*(one(t, pairs) for t, pairs in by_target.items()))
        except SidecarError as exc:
            if exc.code == codes.INVALID_ARGUMENT:  # a duplicate: the write can only fail
                await self._undo(namespace, component, plan)
            raise
        return len(flat) // 2

    async def commit(
        self, namespace: str, component: str, seed_id: str, sources: dict[int, int]
    ) -> SeedDone:
        """Make the write visible: merge, then publish every task; see the module docstring."""
        plan = await self._plans.current(namespace, component, seed_id)
        if plan.phase in ("stage", "merge"):
            plan.phase = "merge"
            await self._plans.save(namespace, component, plan)
            try:
                for t in range(plan.to):
                    await self._merge(TaskKey(namespace, component, t), plan, sources)
            except SidecarError as exc:
                if exc.code == codes.INVALID_ARGUMENT:  # a duplicate key: nothing is visible
                    await self._undo(namespace, component, plan)
                raise
            plan.phase = "publish"
            await self._plans.save(namespace, component, plan)
        return await self._publish(namespace, component, plan)

    async def abort(self, namespace: str, component: str, seed_id: str) -> bool:
        """Undo the write (Spark aborted its job); False when it was no longer under way."""
        plan = await self._plans.get(namespace, component)
        if plan is None or plan.id != seed_id:
            return False
        if plan.phase == "publish":  # committed already: finishing is the only way on
            await self._publish(namespace, component, plan)
            return False
        await self._undo(namespace, component, plan)
        return True

    async def settle(self, namespace: str, component: str | None) -> list[str]:
        """Finish or undo the namespace's abandoned writes (no call within their lease)."""
        notes = []
        for gone in await self._plans.abandoned(namespace, component):
            plan, comp = gone.plan, gone.component
            what = (
                f"the write {plan.id} of {namespace}/{comp} (not heard of for {gone.idle_s:.0f} s)"
            )
            if plan.phase == "publish":
                done = await self._publish(namespace, comp, plan)
                notes.append(f"finished {what}: it had been committed; {done.keys} keys are "
                             f"visible in {done.tasks} tasks at batch {done.batch}")  # fmt: skip
            else:
                await self._undo(namespace, comp, plan)
                notes.append(f"undid {what}: its job stopped before Spark committed it; "
                             "nothing of it was ever visible")  # fmt: skip
            log.warning("abandoned data source write settled", extra={"note": notes[-1]})
        return notes

    # -- the phases --------------------------------------------------------------------

    async def _batch(self, spec: SeedSpec, existing: Sequence[int]) -> int:
        """The batch the written tasks record (see SeedBeginRequest.batch)."""
        ns, comp = spec.namespace, spec.component
        batches = await meta.fields(self._conn, ns, comp, existing, ("batch", "stash_batch"))
        for p, m in batches.items():
            if m["stash_batch"] is not None and not spec.overwrite:  # lua/open.lua's stash
                fq = TaskKey(ns, comp, p).fq
                raise errors.finished_batch_aside(fq, m["stash_batch"], "write to it")
        highest = max((int(m["batch"] or -1) for m in batches.values()), default=-1)
        if spec.batch is None:
            return highest if existing and not spec.overwrite else -1
        if existing and not spec.overwrite and spec.batch < highest:
            raise errors.bad_argument(
                f"{ns}/{comp}: its tasks are at batch {highest}; a write that adds to it "
                f"cannot record the older batch {spec.batch} (a replay would count twice). "
                f"Nothing was written. Give batchId >= {highest}, or mode overwrite."
            )
        return spec.batch

    async def _merge(self, task: TaskKey, plan: SeedPlan, sources: dict[int, int]) -> None:
        stage, att = seed_keys(task, plan.id)
        staged = sorted(text(a) for a in await self._smembers(att))
        keep = {f"{s}.{a}" for s, a in sources.items()}
        for i in range(0, max(len(staged), 1), MERGE_SOURCES):
            part = staged[i : i + MERGE_SOURCES]
            keys = [task_keys(task)[0], stage, att, *(seed_key(task, plan.id, a) for a in part)]
            rest = ["1" if a in keep else "0" for a in part]
            await self._script("seed_merge", task, keys, rest, lock=plan.lock)

    async def _publish(self, namespace: str, component: str, plan: SeedPlan) -> SeedDone:
        gen, keys = new_generation(), 0
        mode = "overwrite" if plan.overwrite else "append"
        for t in range(plan.to):
            task = TaskKey(namespace, component, t)
            stage = seed_keys(task, plan.id)[0]
            r = await self._script(
                "seed_publish", task,
                (*task_keys(task), stage, edits_key(task), ttl_key(task), stash_key(task)),
                lock=plan.lock, partitions=str(plan.to), batch=str(plan.batch), new_gen=gen,
                now=now(), codec="json", mode=mode,
            )  # fmt: skip
            keys += int(fields(r)["keys"])
            await self._records.index(task)
        for p in (p for p in plan.existing if p >= plan.to):  # overwrite with fewer tasks
            task = TaskKey(namespace, component, p)
            await self._script("rescale_retire", task, every_key(task), lock=plan.lock)
            await self._records.unindex(task)
        await self._plans.remove(namespace, component, plan.to)
        log.warning(
            "data source write committed",
            extra={"namespace": namespace, "component": component, "seed": plan.id,
                   "tasks": plan.to, "keys": keys, "batch": plan.batch},
        )  # fmt: skip
        return SeedDone(tasks=plan.to, keys=keys, batch=plan.batch)

    async def _undo(self, namespace: str, component: str, plan: SeedPlan) -> None:
        for p in plan.held:
            task = TaskKey(namespace, component, p)
            stage, att = seed_keys(task, plan.id)
            staged = await self._smembers(att)
            attempts = [seed_key(task, plan.id, text(a)) for a in staged]
            keys = (task_keys(task)[0], stage, att, *attempts)
            await self._script("seed_undo", task, keys, lock=plan.lock)
        await self._plans.remove(namespace, component, None)
        log.warning(
            "data source write undone",
            extra={"namespace": namespace, "component": component, "seed": plan.id},
        )

    # -- helpers -----------------------------------------------------------------------

    async def _smembers(self, key: str) -> list[Any]:
        async def call() -> Any:
            return await self._conn.client.smembers(key)

        return list(await self._conn.run("seed", call))

    async def _script(
        self, name: str, task: TaskKey, keys: Sequence[str], rest: Sequence[Any] = (), **args: str
    ) -> Any:
        argv = self._conn.scripts[name].args(rest, **args)

        async def call() -> Any:
            return await self._conn.evalsha(name, keys, argv)

        try:
            return await self._conn.run("seed", call)
        except rex.ResponseError as exc:
            if str(exc) == "TSGONE":
                seed_id = args.get("lock", "").removeprefix(SEED_LOCK).partition(":")[0]
                raise errors.seed_gone(task.namespace, task.component, seed_id) from None
            raise refusal(exc, Refused(task.fq, name)) from None
