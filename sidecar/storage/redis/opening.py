"""Open's questions that only the sidecar can answer: a new or lost task, a seed, a loss.

`OpenScript.run` runs lua/open.lua; its refusals TSNEW (a task with no keys at all),
TSRESCALING by a seed's lock and TSLOST behind send the sidecar to the namespace's
records (records.py), to the data source's abandoned writes and to the versions it saw
(seen.py), and run the script again with the answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.exceptions as rex

from taskstate.proto.ids import similar

from ... import errors
from ..values import TaskKey
from .keys import edits_key, stash_key, task_keys, ttl_key
from .records import NamespaceRecords
from .routing import Connection
from .scripts import SEED_LOCK, Refused, refusal
from .seen import SeenVersions

log = logging.getLogger("taskstate.sidecar.redis")


class OpenScript:
    """lua/open.lua, run with what only the sidecar can ask Redis about."""

    def __init__(
        self,
        conn: Connection,
        records: NamespaceRecords,
        settle: Callable[[str, str | None], Awaitable[list[str]]],
        seen: SeenVersions,
    ) -> None:
        self._conn = conn
        self._records = records
        self._settle = settle  # finishes or undoes an abandoned write of the data source
        self._seen = seen

    async def run(
        self,
        task: TaskKey,
        batch: int | None,
        codec: str,
        args: dict[str, str],
        partitions: int | None,
        commit: dict[str, Any] | None = None,
        wait: tuple[int, ...] = (),
    ) -> Any:
        """Run open.lua (open_commit.lua with `commit`); a refusal is its SidecarError.

        TSNEW (a task with no keys at all): the index and the namespace's record tell a
        new task from a lost one, and the component's record holds its partition count
        (checked, or recorded by the first Open that declares one) and any rescale under
        way. TSLOST behind (Redis holds an older version than this sidecar saw): refused,
        unless `taskstate adopt` accepted it since. Each answer clears its own flag, so
        the script runs at most three times, and once more after an abandoned write of the
        data source that held the task was settled.
        """
        name = "open" if commit is None else "open_commit"
        script = self._conn.scripts[name]
        keys = (*task_keys(task), edits_key(task), ttl_key(task), stash_key(task))
        settled = False
        while True:
            argv = script.args(**args, **(commit or {}))

            async def call(argv: list[Any] = argv) -> Any:
                return await self._conn.evalsha(name, keys, argv, wait)

            try:
                return await self._conn.run(name, call)
            except rex.ResponseError as exc:
                reply = str(exc)
                if reply == "TSNEW" and args["ask_index"] == "1":
                    await self._refuse_if_lost(task, batch, partitions)
                    args["ask_index"] = "0"  # new indeed
                elif reply.startswith(f"TSRESCALING {SEED_LOCK}") and not settled:
                    settled = True  # held by a write: refused as such unless it was abandoned
                    if not await self._settle(task.namespace, task.component):
                        refused = Refused(task.fq, name, batch, codec, partitions)
                        raise refusal(exc, refused) from None
                elif reply.startswith("TSLOST behind ") and args["seen_gen"]:
                    await self._refuse_if_behind(task, batch, reply.split()[2:])
                    args["seen_gen"] = args["seen_ver"] = ""  # the older state was accepted
                else:
                    refused = Refused(task.fq, name, batch, codec, partitions)
                    raise refusal(exc, refused) from None

    async def _refuse_if_lost(
        self, task: TaskKey, batch: int | None, partitions: int | None
    ) -> None:
        indexed, namespace_known, component = await self._records.known(task)
        if component.seed is not None:
            if await self._settle(task.namespace, task.component):
                indexed, namespace_known, component = await self._records.known(task)
            if component.seed is not None:
                raise errors.seeding(task.fq)
        if component.rescale is not None:
            raise errors.rescaling(task.fq, json.loads(component.rescale).get("to", "?"))
        if indexed:  # it had state once: all of it is gone
            raise errors.state_lost_task(task.fq, batch)
        if batch is not None and batch > 0 and not namespace_known:
            # Spark is past batch 0, and Redis knows nothing of the namespace
            raise errors.state_lost_namespace(
                task.fq, task.namespace, batch, await self._similar_namespaces(task)
            )
        recorded = component.partitions
        if recorded is not None:
            if (partitions is not None and partitions != recorded) or task.partition >= recorded:
                raise errors.partitions_changed(task.fq, recorded, partitions)
        elif partitions is not None:
            await self._records.record_partitions(task, partitions)

    async def _similar_namespaces(self, task: TaskKey) -> list[str]:
        """Namespaces of a name close to the task's that hold its component (a typo?).

        Best effort: a failure here must not replace the refusal it adds to.
        """
        found = []
        try:
            for ns in similar(task.namespace, await self._records.namespaces()):
                if await self._records.members(ns, task.component):
                    found.append(ns)
        except Exception as exc:  # e.g. Redis went away mid-scan
            log.warning("no similar namespaces looked up", extra={"error": str(exc)})
        return found

    async def _refuse_if_behind(self, task: TaskKey, batch: int | None, held: list[str]) -> None:
        seen = self._seen.get(task)
        adoptions = await self._records.adoptions(task.namespace)
        if seen is None or (seen.refused_at is not None and adoptions > seen.refused_at):
            log.warning(
                "task's older state accepted (taskstate adopt): Redis lost commits",
                extra={"task": task.fq, "seen_version": seen and seen.version},
            )
            self._seen.forget(task)
            return
        seen.refused_at = adoptions
        stored_batch, stored_ver = (held + ["?", "?"])[:2]
        raise errors.state_lost_behind(
            task.fq, stored_batch, stored_ver, seen.batch, seen.ver, batch
        )
