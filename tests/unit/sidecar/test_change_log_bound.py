"""The change log's bound is one number in two places: commit.lua trims Redis' log, and
the tests that fill the log past it read LOG_MIN and LOG_FRACTION from storage/values.py."""

from __future__ import annotations

from taskstate.sidecar.storage.redis.scripts import Script
from taskstate.sidecar.storage.values import LOG_FRACTION, LOG_MIN


def test_commit_script_trims_at_the_bound_base_py_names() -> None:
    source = Script.load("commit").source
    assert f"local LOG_MIN, LOG_FRACTION = {LOG_MIN}, {LOG_FRACTION}\n" in source
    assert "math.max(LOG_MIN, math.floor(size / LOG_FRACTION))" in source
