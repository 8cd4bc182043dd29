"""The demo's --expire-after without Spark: its TaskState ttl against its plain-dict rule.

One task of the demo's job (every hashtag in one partition), batch after batch, through a
real sidecar and redis-server: TaskState(now=the batch's event time) with the demo's
per-key ttl holds, after every batch, exactly what a plain dict holds under the demo's
mirrored rule, which is exactly the hashtags seen in the batch or the N buckets before it;
a replayed batch rolls its expirations back and expires them again, to the same state.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from taskstate.client import LocalContext, TaskState, _cache
from taskstate.demo.trending import (
    BUCKET_S,
    HASHTAG,
    batch_now_ms,
    expire_plain,
    tags_by_bucket,
    ttl_store,
    tweet,
    update_tags,
)
from taskstate.testing import SidecarProcess

pytestmark = pytest.mark.integration

PER_BATCH, BUCKETS, EXPIRE_AFTER, BATCHES = 300, 6, 2, 6


def events(batch: int) -> list[tuple[float, int, str]]:
    """The (ts, tweet id, tag) events of a batch, as the query hands them to the task."""
    out = []
    for i in range(batch * PER_BATCH, (batch + 1) * PER_BATCH):
        _, ts, text = tweet(i, PER_BATCH, BUCKETS)
        out += [(ts, i, tag) for tag in re.findall(HASHTAG, text)]
    return out


def run_batch(side: SidecarProcess, ns: str, batch: int) -> tuple[dict[str, Any], Any]:
    """The demo's taskstate block for one batch: (the state after it, what Open found)."""
    with TaskState(
        LocalContext(0, batch_id=batch),
        component="hashtag-ewma",
        namespace=ns,
        sidecar=side.target,
        now=batch_now_ms(batch, BUCKETS),
    ) as s:
        update_tags(s, events(batch), (batch + 1) * BUCKETS - 1, ttl_store(s, EXPIRE_AFTER))
        return dict(s), s.info


def test_taskstate_ttl_expires_exactly_what_the_plain_rule_does(
    sidecar: SidecarProcess, namespace: str
) -> None:
    by_bucket = tags_by_bucket(BATCHES, PER_BATCH, BUCKETS)
    plain: dict[str, Any] = {}
    expired_total = 0
    came_back = set()  # hashtags that expired and were seen again: they start afresh
    for batch in range(BATCHES):
        before = set(plain)
        gone = expire_plain(plain, batch_now_ms(batch, BUCKETS), EXPIRE_AFTER)
        left = set(plain)
        update_tags(plain, events(batch), (batch + 1) * BUCKETS - 1)
        came_back |= (before - left) & set(plain)
        state, info = run_batch(sidecar, namespace, batch)
        assert info.now_ms == batch * BUCKETS * BUCKET_S * 1000
        assert info.expired == gone, batch
        expired_total += gone
        assert state == plain, batch  # the same keys, and the same floats
        window = range(max(0, batch * BUCKETS - EXPIRE_AFTER), (batch + 1) * BUCKETS)
        assert set(state) == set().union(*(by_bucket[k] for k in window)), batch
    assert expired_total > 20 and came_back  # the rule had work to do
    # the last batch again, as Spark replays it: another attempt in a fresh worker rolls
    # back the batch (its expirations included) and expires the same keys again
    _cache.sessions.clear()
    state, info = run_batch(sidecar, namespace, BATCHES - 1)
    assert info.rolled_back and info.expired == gone > 0
    assert state == plain
