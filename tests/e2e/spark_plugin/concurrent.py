"""Fault runs that mostly wait (for an outage, a failover), run at the same time.

Each run is one query of the example job on `local-cluster` with the executor plugin,
against a Redis of its own; the tests check one property of every run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

STAGGER_S = 3  # between the runs' starts: local-cluster names applications by the second


class Runs(Generic[T]):
    """Each run's result, or what it failed with (raised by the test that asks for it)."""

    def __init__(self, results: dict[str, T | BaseException]) -> None:
        self._results = results

    def __getitem__(self, name: str) -> T:
        r = self._results[name]
        if isinstance(r, BaseException):
            raise AssertionError(f"{name}: the run failed: {r}") from r
        return r


def run_concurrently(names: Iterable[str], run: Callable[[str], T]) -> Runs[T]:
    """`run(name)` for each name, in threads started STAGGER_S apart; all of them ended."""
    out: dict[str, T | BaseException] = {}

    def one(name: str) -> None:
        try:
            out[name] = run(name)
        except BaseException as exc:  # reported by each test of that run
            out[name] = exc

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for t in threads:
        t.start()
        time.sleep(STAGGER_S)
    for t in threads:
        t.join()
    return Runs(out)


def executor_logs(faults: Path) -> str:
    """The executors' stderr, from local-cluster's work directory (applications started in
    the same second share one: STAGGER_S keeps them apart)."""
    import pyspark

    work = Path(pyspark.__file__).parent / "work"
    apps = [work / app for app in (faults / "app-ids").read_text().split()]
    return "\n".join(
        p.read_text(errors="replace") for app in apps for p in sorted(app.glob("*/stderr"))
    )
