"""The version token of a task's committed content: `generation:counter`.

The generation is a random id given when a task's state starts afresh (a new task, an
import, a rescale); the counter goes up with every commit, rollback and edit. A worker
holding version `g:5` of a task whose state is at `g:9` may ask for what changed since
(the change log covers one generation); a worker holding another generation restores.
Open, Commit and Restore carry the token as text; this module is its one spelling
(the Lua scripts build it the same way: `gen .. ':' .. ver`).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Version:
    """A parsed version token."""

    gen: str
    counter: int

    @classmethod
    def parse(cls, token: str) -> Version | None:
        """`gen:counter` -> a Version; None for anything else (empty, no counter)."""
        gen, _, counter = token.rpartition(":")
        if not gen or not counter.isdigit():
            return None
        return cls(gen, int(counter))

    def __str__(self) -> str:
        return token(self.gen, self.counter)

    def commits_since(self, older: Version) -> int | None:
        """How many versions this one is past `older`; None across generations."""
        if older.gen != self.gen:
            return None
        return self.counter - older.counter


def token(gen: str, counter: int | str) -> str:
    """The version token of generation `gen` at `counter`."""
    return f"{gen}:{counter}"


def same_generation(a: str, b: str) -> bool:
    """Whether two version tokens are of one (non-empty) generation."""
    va, vb = Version.parse(a), Version.parse(b)
    return va is not None and vb is not None and va.gen == vb.gen


class _Generations:
    """New generation ids: 32 hex digits, a random half per process and a counter.

    As unique as uuid4's (64 random bits per process, and a process never repeats its
    counter), without a getrandom(2) per Open: every Open hands the scripts a generation
    to start the task with, should it have none (docs/benchmarks.md, figure 19). A
    forked child draws its own random half.
    """

    def __init__(self) -> None:
        self._fresh()
        os.register_at_fork(after_in_child=self._fresh)

    def _fresh(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


new_generation = _Generations()
"""A new generation id (`new_generation()`), for a task's state that starts afresh."""
