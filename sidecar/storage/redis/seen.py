"""The latest version of each task this sidecar saw, to notice Redis going back in time.

A failover to a replica that missed the last writes (durability `applied`), or a restore
from an older backup, leaves a task's metadata at an older version of the same
generation, with nothing else amiss. The sidecar that opened or committed the newer
version remembers it; lua/open.lua refuses an Open below it (TSLOST behind). Bounded:
the least recently seen tasks are forgotten past `limit` (a task that moved to another
sidecar is then simply not checked here).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from taskstate.proto.versions import Version, token

from ..values import TaskKey

LIMIT = 50_000


@dataclass(slots=True)
class Seen:
    """A task's latest version here.

    `refused_at`: the namespace's adoptions count when an Open was refused for it (a
    later `taskstate adopt` accepts the older state).
    """

    gen: str
    ver: int
    batch: int | None
    refused_at: int | None = None

    @property
    def version(self) -> str:
        """gen:counter, as the scripts spell it."""
        return token(self.gen, self.ver)


class SeenVersions:
    """Task -> the latest version opened or committed through this sidecar."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._tasks: OrderedDict[TaskKey, Seen] = OrderedDict()

    def get(self, task: TaskKey) -> Seen | None:
        """What this sidecar saw of `task` (None: nothing, or forgotten)."""
        return self._tasks.get(task)

    def note(self, task: TaskKey, version: str, batch: int | None) -> None:
        """Remember `version` (gen:counter) unless a later one of its generation is known."""
        parsed = Version.parse(version)
        if parsed is None:
            return
        gen, ver = parsed.gen, parsed.counter
        held = self._tasks.get(task)
        if held is not None and held.gen == gen and held.ver > ver:
            self._tasks.move_to_end(task)  # an answer that overtook a later one
            return
        self._tasks[task] = Seen(gen, ver, batch)
        self._tasks.move_to_end(task)
        while len(self._tasks) > self._limit:
            self._tasks.popitem(last=False)

    def forget(self, task: TaskKey) -> None:
        """Stop checking `task` (its older state was accepted)."""
        self._tasks.pop(task, None)
