"""doctor's persistence and eviction checks, from what each server says."""

from __future__ import annotations

from taskstate.sidecar.storage.redis.safety import (
    ServerSafety,
    eviction_check,
    persistence_check,
)


def server(
    aof: bool = True, save: str | None = "", policy: str | None = "noeviction"
) -> ServerSafety:
    return ServerSafety("r:6379", aof, save, policy)


def test_no_aof_and_no_snapshots_fails_and_says_what_to_set() -> None:
    c = persistence_check([server(aof=True), server(aof=False, save="")])
    assert not c.ok and "appendonly yes" in c.detail and "--allow-volatile-redis" in c.detail
    assert "spark.taskstate.sidecar.extraArgs=--allow-volatile-redis" in c.detail


def test_aof_passes_and_snapshots_alone_pass_with_what_a_crash_loses() -> None:
    assert persistence_check([server(aof=True)]).ok
    rdb = persistence_check([server(aof=False, save="3600 1")])
    assert rdb.ok and "RDB only" in rdb.detail and "since the last snapshot" in rdb.detail
    refused = persistence_check([server(aof=False, save=None)])  # CONFIG GET refused
    assert refused.ok and "could not be checked" in refused.detail


def test_an_allkeys_policy_fails_and_a_volatile_one_cannot_touch_our_keys() -> None:
    for policy in ("allkeys-lru", "allkeys-lfu", "allkeys-random"):
        c = eviction_check([server(policy=policy)])
        assert not c.ok and policy in c.detail and "noeviction" in c.detail
    assert eviction_check([server(policy="volatile-lru")]).ok
    assert eviction_check([server(policy="noeviction")]).ok
    unknown = eviction_check([server(policy=None)])
    assert unknown.ok and "could not be read" in unknown.detail
