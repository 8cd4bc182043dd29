"""Figures 16 and 17: keys that expire, against keys that do not, in the same run.

- A block writing 10,000 keys of 100-byte values, each with a time to live, against the
  same block without one (the expiry index kept beside the values, the envelopes): the
  commit's keys/s ratio, target >= 0.8.
- A whole restore of a state whose keys half expired (the first claim of the batch
  deleted them) against the restore of the same state with none expired: the time ratio,
  target <= 0.6 (half the keys, half the cost).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from taskstate.client import LocalContext, TaskState
from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing.worker import forget_cached_state

from ..common import Bench, Figure, hscan_s, say, value

SIZES = {"full": (10_000, 7, 200_000), "quick": (2_000, 3, 20_000)}


def measure(bench: Bench, size: tuple[int, int, int]) -> list[Figure]:
    """The expiry figures."""
    fields, repeats, state = size
    return [
        commit_with_ttl(bench.target, fields, repeats, bench.redis.client()),
        restore_half(bench.target, state, bench.redis.client()),
    ]


def _block(target: str, ns: str, batch: int, **kw: object) -> TaskState:
    return TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns,
                     sidecar=target, **kw)  # type: ignore[arg-type]  # fmt: skip


def commit_with_ttl(target: str, fields: int, repeats: int, redis: Any = None) -> Figure:
    """Commits of `fields` keys with a time to live on each, against the same without.

    Each kind runs `repeats` + 1 blocks in a row (the first warms up), twice, kinds
    alternating, each run from a collected Lua heap (neither pays for the other's garbage
    in Redis), after one untimed round of both. The plain blocks used to depend on the
    process' history: 51-55 ms in a fresh process (about 5,900 page faults per block, from
    orjson's output held to the commit, client/_block.py), 36-38 after the data source
    figure had grown the heap; so the ratio was 0.97-1.00 alone and 0.70-0.72 in order.
    With the client's copy of each value both orders measure the same blocks (the last
    runs: docs/benchmarks.md, figure 16).
    """
    keys = [f"key-{i}" for i in range(fields)]
    times: dict[str, list[float]] = {"ttl": [], "plain": []}
    b = 0
    for rnd in range(3):  # round 0 is not timed
        for kind, kw in (("plain", {}), ("ttl", {"ttl": 3600.0})):
            ns = f"bench-expiry-{kind}-{os.getpid()}"
            if redis is not None:
                redis.eval("collectgarbage('collect') return 0", 0)
            for n in range(repeats + 1):
                t0 = time.perf_counter()
                with _block(target, ns, b + n, **kw) as s:
                    for i, k in enumerate(keys):
                        s[k] = value(i, b + n)
                if n and rnd:
                    times[kind].append(time.perf_counter() - t0)
        b += repeats + 1
    last = b - 1
    with _block(target, f"bench-expiry-ttl-{os.getpid()}", b, ttl=3600.0) as s:
        if len(s) != fields or s["key-7"] != value(7, last):
            raise AssertionError("expiry benchmark: the committed state is not what was written")
    plain, ttl = statistics.median(times["plain"]), statistics.median(times["ttl"])
    ratio = plain / ttl
    return Figure(
        f"block writing {fields:,} keys, each with a ttl, vs without", fields / ttl,
        fields / plain, "keys/s", ratio, ">= 0.8", ratio >= 0.8,
        {"ttl_ms": ttl * 1e3, "plain_ms": plain * 1e3, "repeats": repeats},
    )  # fmt: skip


def restore_half(target: str, keys: int, redis: Any = None, rounds: int = 11) -> Figure:
    """A restore of a state half of whose keys expired, against the same state whole.

    Both states are made first; then each round restores the whole one and the half one
    in turn, in a fresh worker each (eager), and the figure is the median of the rounds'
    ratios (11 rounds; 7 until later on 2026-11-26): a slow moment of a noisy machine
    strikes both restores of a round rather than one kind (until 2026-11-26 each kind took
    the best of three in a row, and six runs on one machine read 0.48-0.65). Beside it,
    the same ratio for redis-py's HSCAN of the two hashes into a dict (`hscan_ratio`):
    Redis' own cost of the smaller, sparser hash (a hash keeps its table's size until it
    is nine tenths empty), which a restore cannot beat.
    """
    names = {}
    for kind in ("whole", "half"):
        ns = names[kind] = f"bench-expiry-restore-{kind}-{os.getpid()}"
        with _block(target, ns, 0, ttl=0.5 if kind == "half" else None) as s:
            for i in range(keys):
                if i % 2 or kind == "whole":
                    s.set(f"k{i}", value(i, 0), ttl=None)
                else:
                    s[f"k{i}"] = value(i, 0)  # the block's 0.5 s
    time.sleep(0.7)
    for ns in names.values():
        with _block(target, ns, 1) as s:  # the batch's first claim expires half
            pass
    timed: dict[str, list[float]] = {"whole": [], "half": [], "scan_whole": [], "scan_half": []}
    os.environ["TASKSTATE_LOAD"] = "eager"
    try:
        for b in range(2, 2 + rounds):
            for kind, ns in names.items():
                forget_cached_state()  # a fresh worker: the whole state comes over
                t0 = time.perf_counter()
                with _block(target, ns, b) as s:
                    n = len(s)
                timed[kind].append(time.perf_counter() - t0)
                # the block holds its mapping: freed here, not inside the next restore's
                # timing (a fresh worker frees nothing; before this line each half-expired
                # restore freed the whole state restored before it, 8 ms per 200,000 keys,
                # and each whole restore the half one's, 4 ms)
                del s
                if redis is not None:
                    timed[f"scan_{kind}"].append(hscan_s(redis, data_key(ns, "c", 0))[0])
                want = keys // 2 if kind == "half" else keys
                if n != want:
                    raise AssertionError(f"expiry benchmark: restored {n} keys, not {want}")
    finally:
        del os.environ["TASKSTATE_LOAD"]
    ratio = _paired(timed["half"], timed["whole"])
    half, whole = statistics.median(timed["half"]), statistics.median(timed["whole"])
    scan = ""
    if redis is not None:
        scan = f", HSCAN's ratio {_paired(timed['scan_half'], timed['scan_whole']):.2f}"
    say(f"restore {keys:,} keys: whole {whole:.3f} s, half expired {half:.3f} s (medians){scan}")
    return Figure(
        f"restore of {keys:,} keys, half expired, vs none expired", half, whole, "s",
        ratio, "<= 0.6", ratio <= 0.6,
        {"half_s": half, "whole_s": whole, "rounds": rounds,
         "half_min_s": min(timed["half"]), "whole_min_s": min(timed["whole"]),
         "hscan_ratio": _paired(timed["scan_half"], timed["scan_whole"]) if redis else None},
    )  # fmt: skip


def _paired(a: list[float], b: list[float]) -> float:
    """The median of the rounds' ratios a[i] / b[i]."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))
