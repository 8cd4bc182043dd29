"""Whether a Redis can lose task state by itself: its persistence and its eviction policy.

`taskstate doctor` fails on either (exit 1, saying what to change), and the sidecar logs
a warning for each when it starts (`--allow-volatile-redis` silences them for throwaway
setups such as the demo). A Redis that keeps nothing on disk loses every task's state
when it restarts; one that evicts any key (`allkeys-*` policies) drops task hashes
under memory pressure. Either would look like a fresh start to a job that is not
told, which is what `StateLostError` and these checks are for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..values import Check

PERSISTENCE = "persistence"
EVICTION = "eviction"
# how a user silences the start-up warnings, with or without the executor plugin
SILENCE_WITH = (
    "--allow-volatile-redis (with the executor plugin: "
    "--conf spark.taskstate.sidecar.extraArgs=--allow-volatile-redis)"
)


@dataclass(frozen=True)
class ServerSafety:
    """What one server says of its persistence and eviction (None: could not be read)."""

    address: str
    aof_enabled: bool
    rdb_save: str | None  # CONFIG GET save: "" when snapshots are off
    maxmemory_policy: str | None


def persistence_check(servers: Sequence[ServerSafety]) -> Check:
    """Fails when a server keeps nothing on disk (no AOF and no RDB snapshots)."""
    none = [s.address for s in servers if not s.aof_enabled and s.rdb_save == ""]
    if none:
        return Check(
            PERSISTENCE,
            False,
            f'{", ".join(none)}: no persistence (appendonly no, save ""): a restart of '
            "Redis loses every task's state. Set 'appendonly yes' (CONFIG SET appendonly yes, "
            "and in redis.conf); for a throwaway setup, start the sidecar with "
            f"{SILENCE_WITH}.",
        )
    rdb_only = [s.address for s in servers if not s.aof_enabled]
    if rdb_only:
        unknown = any(s.rdb_save is None for s in servers if not s.aof_enabled)
        how = "RDB snapshots could not be checked (CONFIG refused)" if unknown else "RDB only"
        return Check(
            PERSISTENCE,
            True,
            f"{', '.join(rdb_only)}: {how}: a crash loses the commits since the last "
            "snapshot (tasks then refuse to open with StateLostError where that shows). "
            "Prefer 'appendonly yes'.",
        )
    return Check(PERSISTENCE, True, "append-only file on every server")


def eviction_check(servers: Sequence[ServerSafety]) -> Check:
    """Fails when a server may evict any key under memory pressure (allkeys-*)."""
    evicting = [
        f"{s.address} ({s.maxmemory_policy})"
        for s in servers
        if (s.maxmemory_policy or "").startswith("allkeys-")
    ]
    if evicting:
        return Check(
            EVICTION,
            False,
            f"{', '.join(evicting)}: Redis may evict task state under memory pressure. Set "
            "'maxmemory-policy noeviction' (a full Redis then refuses commits, which fail "
            "loudly and are retried, instead of dropping state).",
        )
    unknown = [s.address for s in servers if s.maxmemory_policy is None]
    if unknown:
        return Check(EVICTION, True, f"{', '.join(unknown)}: the policy could not be read")
    policies = sorted({s.maxmemory_policy or "" for s in servers})
    return Check(EVICTION, True, f"{', '.join(policies)} (taskstate sets no TTL on its keys)")
