"""Writes of the data source in process memory: the same rules as redis/seed.py.

The plan and what each Spark task staged live in `MemoryState.seeds`; nothing of a write
is in the tasks until `commit` (which has no phase in between to be interrupted in).
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from taskstate.proto.versions import new_generation

from ... import errors
from ...placement import partitions_of
from ...spark_hash import KEY_TYPES
from ..values import SeedDone, SeedSpec, SeedStarted, TaskKey
from .store import MemoryState
from .task import _Task


@dataclass
class _Seed:
    id: str
    spec: SeedSpec
    batch: int
    existing: list[int]
    alive: float = field(default_factory=time.time)
    # target -> (source, attempt) -> key -> value
    staged: dict[int, dict[tuple[int, int], dict[str, bytes]]] = field(
        default_factory=lambda: defaultdict(dict)
    )


class MemorySeeder:
    """base.SeedStore on a MemoryState."""

    def __init__(self, state: MemoryState) -> None:
        self.state = state
        state.settle = self._settle

    async def begin(self, spec: SeedSpec) -> SeedStarted:
        """See base.SeedStore.begin."""
        ns, comp = spec.namespace, spec.component
        if spec.key_type not in KEY_TYPES:
            raise errors.bad_argument(f"{ns}/{comp}: key type {spec.key_type!r} cannot be placed")
        settled = self._settle(ns, comp)
        if (ns, comp) in self.state.seeds:
            raise errors.seeding(f"{ns}/{comp}")
        tasks = {
            k.partition: t
            for k, t in self.state.tasks.items()
            if (k.namespace, k.component) == (ns, comp)
        }
        recorded = self.state.partition_counts.get((ns, comp))
        if tasks and not spec.overwrite:
            count = recorded if recorded is not None else max(tasks) + 1
            if count != spec.to and (recorded is not None or max(tasks) >= spec.to):
                raise errors.partitions_changed(f"{ns}/{comp}/0", count, spec.to)
        now = time.time()
        for p, t in tasks.items():
            if now - t.updated_at < spec.quiet_s:
                raise errors.bad_argument(f"{ns}/{comp}/{p} was written recently")
        for p, t in tasks.items():
            if t.stash is not None and not spec.overwrite:  # lua/open.lua's stash
                raise errors.finished_batch_aside(f"{ns}/{comp}/{p}", t.stash[0], "write to it")
        highest = max((t.batch for t in tasks.values()), default=-1)
        batch = spec.batch
        if batch is None:
            batch = highest if tasks and not spec.overwrite else -1
        elif tasks and not spec.overwrite and batch < highest:
            raise errors.bad_argument(f"{ns}/{comp}: its tasks are at batch {highest}")
        seed = _Seed(uuid.uuid4().hex[:12], spec, batch, sorted(tasks))
        self.state.seeds[(ns, comp)] = seed
        return SeedStarted(seed.id, batch, settled)

    async def stage(
        self, namespace: str, component: str, seed_id: str, source: int, attempt: int,
        flat: Sequence[str],
    ) -> int:  # fmt: skip
        """See base.SeedStore.stage."""
        seed = self._current(namespace, component, seed_id)
        keys = flat[0::2]
        targets = partitions_of(keys, seed.spec.to, seed.spec.key_type)
        for t, k, v in zip(targets, keys, flat[1::2], strict=True):
            staged = seed.staged[t].setdefault((source, attempt), {})
            if k in staged:  # the write can only fail: undone at once, as in Redis
                del self.state.seeds[(namespace, component)]
                raise errors.seed_duplicate(namespace, component, k)
            staged[k] = v.encode()
        return len(flat) // 2

    async def commit(
        self, namespace: str, component: str, seed_id: str, sources: dict[int, int]
    ) -> SeedDone:
        """See base.SeedStore.commit."""
        seed = self._current(namespace, component, seed_id)
        merged: dict[int, dict[str, bytes]] = {}
        for t in range(seed.spec.to):
            merged[t] = {}
            for (s, attempt), keys in seed.staged[t].items():
                if sources.get(s) != attempt:
                    continue  # an attempt Spark did not keep
                for k, v in keys.items():
                    if k in merged[t]:
                        del self.state.seeds[(namespace, component)]
                        raise errors.seed_duplicate(namespace, component, k)
                    merged[t][k] = v
        del self.state.seeds[(namespace, component)]
        gen, now = new_generation(), time.time()
        for p in seed.existing:
            if p >= seed.spec.to:
                del self.state.tasks[TaskKey(namespace, component, p)]
        for t, written in merged.items():
            key = TaskKey(namespace, component, t)
            old = self.state.tasks.get(key)
            data = dict(old.data) if old is not None and not seed.spec.overwrite else {}
            data.update(written)
            self.state.tasks[key] = _Task(
                data=data,
                epoch=(old.epoch if old else 0) + 1,
                batch=seed.batch,
                gen=gen,
                ver=1,
                codec="json",
                position=old.position if old is not None and not seed.spec.overwrite else None,
                updated_at=now,
                last_writer="taskstate data source",
                log_floor=1,
                log_ver=1,
                log_floor_batch=seed.batch,
                partitions=seed.spec.to,
            )
        self.state.partition_counts[(namespace, component)] = seed.spec.to
        total = sum(len(self.state.tasks[TaskKey(namespace, component, t)].data) for t in merged)
        return SeedDone(seed.spec.to, total, seed.batch)

    async def abort(self, namespace: str, component: str, seed_id: str) -> bool:
        """See base.SeedStore.abort."""
        seed = self.state.seeds.get((namespace, component))
        if seed is None or seed.id != seed_id:
            return False
        del self.state.seeds[(namespace, component)]
        return True

    async def settle(self, namespace: str, component: str | None) -> list[str]:
        """See base.SeedStore.settle."""
        return self._settle(namespace, component)

    def _settle(self, namespace: str, component: str | None) -> list[str]:
        notes = []
        for ns, comp in list(self.state.seeds):
            seed = self.state.seeds[(ns, comp)]
            idle = time.time() - seed.alive
            if ns == namespace and component in (None, comp) and idle >= seed.spec.lease_s:
                del self.state.seeds[(ns, comp)]
                notes.append(f"undid the write {seed.id} of {ns}/{comp}")
        return notes

    def _current(self, namespace: str, component: str, seed_id: str) -> _Seed:
        seed: _Seed | None = self.state.seeds.get((namespace, component))
        if seed is None or seed.id != seed_id:
            raise errors.seed_gone(namespace, component, seed_id)
        seed.alive = time.time()
        return seed
