"""The writes of the data source under way, as the namespace's record keeps them.

Per component, `seed/<comp>` holds the plan (JSON) and `seed_alive/<comp>` when a call of
the write last reached a sidecar: a write whose lease has run out since is abandoned.
Both sit in the namespace's record (keys.py), so every sidecar sees every write.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ... import errors
from .keys import component_fields, namespace_key, seed_fields
from .replies import text
from .routing import Connection
from .scripts import SEED_LOCK


@dataclass
class SeedPlan:
    """A write under way."""

    id: str
    to: int
    key_type: str
    overwrite: bool
    batch: int
    existing: list[int]  # the component's tasks when the write began
    lease_s: float
    phase: str = "stage"  # stage, merge, publish
    started: float = field(default_factory=time.time)

    @property
    def lock(self) -> str:
        """The value a held task's metadata carries."""
        return f"{SEED_LOCK}{self.id}:{self.to}"

    @property
    def held(self) -> list[int]:
        """Every task the write holds: its targets and the component's tasks."""
        return sorted(set(range(self.to)) | set(self.existing))


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A write whose lease ran out, and for how long nothing was heard of it."""

    component: str
    plan: SeedPlan
    idle_s: float


def now() -> str:
    """The time, as the records keep it."""
    return f"{time.time():.3f}"


class SeedPlans:
    """The plans of one connection's namespaces."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def component(self, namespace: str, component: str) -> tuple[int | None, bool, bool]:
        """(recorded partition count, a rescale holds it, a write holds it)."""
        fields = (*component_fields(component), seed_fields(component)[0])
        record = namespace_key(namespace)
        raw = await self._run(lambda: self._conn.client.hmget(record, *fields))
        parts, rescale, seed = (text(x) or None for x in raw)
        return (int(parts) if parts else None), rescale is not None, seed is not None

    async def claim(self, namespace: str, component: str, plan: SeedPlan) -> bool:
        """Record `plan` unless a write of the component is recorded already."""
        plan_field, alive_field = seed_fields(component)
        record, blob = namespace_key(namespace), json.dumps(asdict(plan))

        async def call() -> Any:
            pipe = self._conn.client.pipeline(transaction=True)  # one key: one slot
            pipe.hsetnx(record, plan_field, blob)
            pipe.hset(record, alive_field, now())
            return await pipe.execute()

        won, _ = await self._run(call)
        return bool(won)

    async def get(self, namespace: str, component: str) -> SeedPlan | None:
        """The write of the component under way, if any."""
        record, plan_field = namespace_key(namespace), seed_fields(component)[0]
        raw = await self._run(lambda: self._conn.client.hget(record, plan_field))
        return None if raw is None else SeedPlan(**json.loads(text(raw)))

    async def current(self, namespace: str, component: str, seed_id: str) -> SeedPlan:
        """The write `seed_id`, which must be under way; it was heard of now."""
        plan = await self.get(namespace, component)
        if plan is None or plan.id != seed_id:
            raise errors.seed_gone(namespace, component, seed_id)
        record, alive_field = namespace_key(namespace), seed_fields(component)[1]
        await self._run(lambda: self._conn.client.hset(record, alive_field, now()))
        return plan

    async def save(self, namespace: str, component: str, plan: SeedPlan) -> None:
        """Record the plan's new phase."""
        record, blob = namespace_key(namespace), json.dumps(asdict(plan))
        plan_field = seed_fields(component)[0]
        await self._run(lambda: self._conn.client.hset(record, plan_field, blob))

    async def remove(self, namespace: str, component: str, partitions: int | None) -> None:
        """The write ended: forget it; a committed one records the partition count."""
        record = namespace_key(namespace)

        async def call() -> Any:
            pipe = self._conn.client.pipeline(transaction=True)  # one key: one slot
            if partitions is not None:
                pipe.hset(record, component_fields(component)[0], str(partitions))
            pipe.hdel(record, *seed_fields(component))
            return await pipe.execute()

        await self._run(call)

    async def abandoned(self, namespace: str, component: str | None) -> list[Abandoned]:
        """The namespace's writes (or the component's) whose lease has run out."""
        record = namespace_key(namespace)
        raw = await self._run(lambda: self._conn.client.hgetall(record))
        fields = {text(k): text(v) for k, v in raw.items()}
        out = []
        for name, blob in fields.items():
            comp = name.partition("/")[2]
            if not name.startswith("seed/") or component not in (None, comp):
                continue
            plan = SeedPlan(**json.loads(blob))
            idle = time.time() - float(fields.get(seed_fields(comp)[1]) or plan.started)
            if idle >= plan.lease_s:
                out.append(Abandoned(comp, plan, idle))
        return out

    async def _run(self, fn: Any) -> Any:
        return await self._conn.run("seed", fn)
