"""The demo's EWMA and tweet stream, without Spark."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import pytest
from PIL.PngImagePlugin import PngImageFile

from taskstate.demo.trending import (
    ALPHA,
    BUCKET_S,
    BURSTS,
    close_until,
    compare,
    top10,
    tweet,
    update_tags,
)


def test_ewma_of_a_steady_rate_converges_to_that_rate() -> None:
    st: dict[str, Any] = {"b": 0, "n": 0, "ewma": 0.0}
    for b in range(200):
        close_until(st, b)
        st["n"] += 10  # 10 tweets per 5 s bucket: 2 tweets/s
    close_until(st, 200)
    assert st["ewma"] == pytest.approx(10 / BUCKET_S, rel=1e-6)


def test_absent_buckets_decay_like_a_load_average() -> None:
    st: dict[str, Any] = {"b": 0, "n": 5, "ewma": 1.0}
    close_until(st, 4)  # closes bucket 0 (5 tweets), then buckets 1..3 pass with none
    after_first = 1.0 + ALPHA * (5 / BUCKET_S - 1.0)
    assert st["ewma"] == pytest.approx(after_first * (1 - ALPHA) ** 3)
    assert (st["b"], st["n"]) == (4, 0)
    close_until(st, 2)  # never goes back
    assert st["b"] == 4


def test_update_tags_catches_every_tag_up_to_the_end_of_the_batch() -> None:
    s: dict[str, Any] = {}
    update_tags(s, [(0.0, 1, "#a"), (1.0, 2, "#a"), (26.0, 3, "#b")], end_bucket=5)
    assert s["#a"]["b"] == 6 and s["#b"]["b"] == 6  # both closed through bucket 5
    a_rate = 2 / BUCKET_S
    expected_a = ALPHA * a_rate * (1 - ALPHA) ** 5
    assert s["#a"]["ewma"] == pytest.approx(expected_a)
    update_tags(s, [], end_bucket=11)  # a batch without #a: it still decays
    assert s["#a"]["ewma"] == pytest.approx(expected_a * (1 - ALPHA) ** 6)


def test_update_is_deterministic_whatever_the_arrival_order() -> None:
    events = [(float(i % 30), i, f"#t{i % 3}") for i in range(90)]
    s1: dict[str, Any] = {}
    s2: dict[str, Any] = {}
    update_tags(s1, events, 5)
    update_tags(s2, list(reversed(events)), 5)
    assert s1 == s2  # bit for bit: the same float operations in the same order


def test_tweets_are_deterministic_and_bursts_rise_and_fall() -> None:
    assert tweet(1234, 1200, 6) == tweet(1234, 1200, 6)
    tag, first, last, _ = BURSTS[0]

    def share(bucket: int) -> float:
        ids = range(bucket * 200, bucket * 200 + 200)  # 1200 tweets per 6 buckets
        return sum(tag in tweet(i, 1200, 6)[2] for i in ids) / 200

    middle = (first + last) // 2
    assert share(first - 2) == 0 and share(last + 2) == 0
    assert share(middle) > share(first + 1) > 0 and share(middle) > share(last - 1) > 0


def test_top10_and_compare() -> None:
    ewma = {(0, f"#t{i}"): float(i) for i in range(15)}
    assert [t for t, _ in top10(ewma, 0)] == [f"#t{i}" for i in range(14, 4, -1)]
    same, err = compare(ewma, dict(ewma))
    assert same and err == 0
    other = dict(ewma)
    other[(0, "#t3")] = 3.5
    del other[(0, "#t9")]
    same, err = compare(ewma, other)
    assert not same and math.isclose(err, 9.0)


def test_demo_names_missing_extras_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from taskstate.demo import trending as demo

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    monkeypatch.setattr(demo, "orchestrate", lambda a: pytest.fail("the demo started"))
    assert demo.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == "taskstate demo: matplotlib missing: pip install 'taskstate[spark,demo]'\n"
    assert not (tmp_path / "out").exists()
    assert demo.missing_extras() == ["matplotlib"]


def test_fault_batches_and_the_chart_marks_them(tmp_path: Path) -> None:
    import json

    from PIL import Image

    from taskstate.demo.trending import chart, fault_batches

    assert fault_batches(12, "all") == {"worker": 3, "sidecar": 6, "restart": 9}
    assert fault_batches(12, "sidecar") == {"sidecar": 6}
    assert fault_batches(12, "none") == {}
    runs = {"golden": {(b, "#a"): float(b) for b in range(8)}, "faulted": {(0, "#a"): 1.0}}
    marks = {"golden": {}, "faulted": fault_batches(8, "all")}
    png = tmp_path / "c.png"
    chart(png, runs, {"golden": "g", "faulted": "f"}, ["#a"], 8, marks)
    with Image.open(png) as img:
        assert json.loads(cast(PngImageFile, img).text["Description"])["faults"] == marks
