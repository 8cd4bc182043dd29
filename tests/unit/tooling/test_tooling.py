"""The developers' tooling stays in step with CI: pre-commit runs what bin/test lints with."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def test_pre_commit_runs_every_lint_step_of_bin_test() -> None:
    steps = re.findall(r'^echo "\[test\] [^"]+"; (.+)$', (ROOT / "bin/test").read_text(), re.M)
    assert len(steps) == 3, steps  # ruff check, ruff format --check, the type check
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    entries = {h["entry"] for repo in config["repos"] for h in repo["hooks"]}
    assert set(steps) <= entries, set(steps) - entries
    done = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
