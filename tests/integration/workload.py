"""A task workload that runs like Spark does: each block is an attempt, a failed attempt
is retried as a new attempt, and only acknowledged commits enter the model."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from taskstate.client import (
    DurabilityError,
    LocalContext,
    SidecarUnavailableError,
    StorageUnavailableError,
    TaskState,
)

# What a fault in Redis may surface as; anything else fails the test.
RETRYABLE = (DurabilityError, StorageUnavailableError, SidecarUnavailableError)


@dataclass
class Outcome:
    """What happened to the attempts of one workload."""

    attempts: int = 0
    errors: list[Exception] = field(default_factory=list)


def update(s: Any, batch: int) -> None:
    """The batch's change: a counter and one key per batch."""
    s["n"] = s.get("n", 0) + 1
    s[f"b{batch}"] = batch


def expected(batches: int) -> dict[str, Any]:
    """The state after batches 0..batches-1, each counted exactly once."""
    out: dict[str, Any] = {"n": batches}
    out.update({f"b{b}": b for b in range(batches)})
    return out


def run_batch(
    target: str,
    namespace: str,
    partition: int,
    batch: int,
    *,
    durability: str = "applied",
    outcome: Outcome | None = None,
    give_up_s: float = 120.0,
) -> None:
    """One task's batch, retried as new attempts until it commits (or `give_up_s`)."""
    outcome = outcome if outcome is not None else Outcome()
    start = time.monotonic()
    attempt = 0
    while True:
        outcome.attempts += 1
        try:
            with TaskState(
                LocalContext(partition, batch_id=batch, attempt=attempt),
                component="c",
                namespace=namespace,
                sidecar=target,
                durability=durability,
            ) as s:
                update(s, batch)
            return
        except RETRYABLE as exc:
            outcome.errors.append(exc)
            if time.monotonic() - start > give_up_s:
                raise
            attempt += 1
            time.sleep(0.2)


def run_round(
    target: str,
    namespace: str,
    partitions: Iterable[int],
    batch: int,
    **kw: Any,
) -> None:
    """Every partition's batch `batch`."""
    for p in partitions:
        run_batch(target, namespace, p, batch, **kw)


def decode_hash(raw: Mapping[Any, Any]) -> dict[str, Any]:
    """A task's data hash as the values the task wrote."""
    import orjson

    return {k.decode(): orjson.loads(v) for k, v in raw.items()}


def assert_faults_struck(label: str, outcome: Outcome, sidecar_log: str) -> None:
    """Every failed attempt was a retryable fault, and the fault really met requests:
    some attempt failed, or the sidecar retried Redis calls. Prints a one-line summary."""
    assert all(isinstance(e, RETRYABLE) for e in outcome.errors), outcome.errors
    kinds = sorted({type(e).__name__ for e in outcome.errors})
    print(
        f"{label}: {outcome.attempts} attempts, {len(outcome.errors)} failed {kinds}, "
        f"{sidecar_log.count('retrying')} Redis calls retried, "
        f"{sidecar_log.count('refreshing the Redis Cluster layout')} layout refreshes"
    )
    assert outcome.errors or "retrying" in sidecar_log, "the fault met no request: untested"
