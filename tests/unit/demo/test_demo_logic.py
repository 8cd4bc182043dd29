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
    batch_now_ms,
    build_parser,
    close_until,
    compare,
    expire_plain,
    expires_at_ms,
    gone_by_the_end,
    is_bounded,
    keys_per_batch,
    live_tags,
    state_lines,
    tags_by_bucket,
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


def test_update_tags_records_the_last_bucket_a_tag_was_seen_in() -> None:
    s: dict[str, Any] = {}
    update_tags(s, [(0.0, 1, "#a"), (11.0, 2, "#a"), (26.0, 3, "#b")], end_bucket=5)
    assert (s["#a"]["seen"], s["#b"]["seen"]) == (2, 5)
    update_tags(s, [(31.0, 4, "#b")], end_bucket=11)  # catching #a up is not seeing it
    assert (s["#a"]["seen"], s["#b"]["seen"]) == (2, 6)
    written: list[str] = []
    update_tags(s, [(61.0, 5, "#c")], 17, lambda tag, st: written.append(tag))
    assert written == ["#c", "#a", "#b"]  # every write goes through `store`, not s[tag]
    assert "#c" not in s


def test_a_tag_expires_once_n_buckets_passed_without_it() -> None:
    # seen in bucket 4; --expire-after 3: buckets 5, 6, 7 without it, gone from bucket 8
    st = {"b": 5, "n": 0, "ewma": 1.0, "seen": 4}
    assert expires_at_ms(st, 3) == 8 * BUCKET_S * 1000
    assert batch_now_ms(2, 4) == 8 * BUCKET_S * 1000  # batch 2 of 4 buckets starts there
    plain = {"#a": dict(st), "#b": dict(st, seen=5)}
    assert expire_plain(plain, 8 * BUCKET_S * 1000 - 1, 3) == 0
    assert expire_plain(plain, 8 * BUCKET_S * 1000, 3) == 1  # at its expiry: gone
    assert set(plain) == {"#b"}


def test_live_tags_is_the_window_of_buckets_and_bounds_the_runs() -> None:
    by_bucket = {0: {"#a", "#b"}, 1: {"#b"}, 2: {"#c"}, 3: set(), 4: {"#a"}, 5: {"#d"}}
    # 2 buckets per batch: batch 1 = buckets 2-3, batch 2 = buckets 4-5
    assert live_tags(by_bucket, 3, 2, None) == [2, 3, 4]  # all seen so far
    assert live_tags(by_bucket, 3, 2, 1) == [2, 2, 2]  # + the one bucket before the batch
    assert live_tags(by_bucket, 3, 2, 9) == [2, 3, 4]
    ewma = {(0, "#a"): 1.0, (0, "#b"): 1.0, (1, "#b"): 1.0, (1, "#c"): 1.0, (2, "#a"): 1.0}
    assert keys_per_batch(ewma, 3) == [2, 2, 1]
    assert is_bounded({"r": [2, 2, 1]}, [2, 2, 2], {"r": 2})
    assert not is_bounded({"r": [2, 3, 1]}, [2, 2, 2], {})
    assert not is_bounded({"r": [2, 2, 1]}, [2, 2, 2], {"r": 3})  # Redis holds more
    streamed = tags_by_bucket(2, 120, 6)
    assert set(streamed) == set(range(12)) and all(t.startswith("#") for t in streamed[0])


def test_state_lines_show_each_run_and_the_bound() -> None:
    labels = {"golden": "golden (no faults)", "plain-dict": "plain dict"}
    lines = state_lines(labels, {"golden": [3, 4], "plain-dict": [3, 2]}, [3, 4],
                        {"golden": 4}, 6)  # fmt: skip
    assert lines[0].endswith("(--expire-after 6: expires when not seen for 6 buckets):")
    assert lines[1].split() == ["batch", "0", "1"]
    assert lines[2].split()[-2:] == ["3", "4"] and lines[3].split()[-2:] == ["3", "2"]
    assert lines[4].startswith("seen in it or 6 buckets before") and lines[4].endswith("4")
    assert lines[5] == "keys in Redis after the last batch: golden 4"
    many = state_lines(labels, {"golden": list(range(40))}, list(range(40)), {}, None)
    assert len(many[1].split()) - 1 <= 17 and many[1].split()[-1] == "39"
    assert not any(line.startswith("expired") for line in lines + many)
    gone = [("#spark", 6), ("#a", 2), ("#b", 3), ("#c", 3), ("#d", 1), ("#e", 0)]
    last = state_lines(labels, {"golden": [3, 4]}, [3, 4], {}, 6, gone)[-1]
    assert last == ("expired and not seen again (golden): #spark (held through batch 6), "
                    "#a (held through batch 2), #b (held through batch 3), #c (held through "
                    "batch 3) and 2 more")  # fmt: skip


def test_gone_by_the_end_lists_the_tags_not_held_after_the_last_batch() -> None:
    ewma = {(0, "#a"): 0.5, (1, "#a"): 0.2, (0, "#b"): 3.0, (0, "#c"): 1.0, (2, "#c"): 1.0}
    ewma |= {(b, "#d"): 1.0 for b in range(3)}
    assert gone_by_the_end(ewma, 3) == [("#b", 0), ("#a", 1)]  # the hottest first
    assert gone_by_the_end(ewma, 1) == []


def test_expire_after_takes_a_positive_number_of_buckets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["--expire-after", "3"]).expire_after == 3
    assert build_parser().parse_args([]).expire_after is None
    for bad in ("0", "-2", "x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--expire-after", bad])
        assert "is not a whole number of 1 or more" in capsys.readouterr().err


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
