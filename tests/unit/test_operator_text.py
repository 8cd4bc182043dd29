"""What operators read: `taskstate --help` and the fix an error names."""

from __future__ import annotations

import pytest

from taskstate.cli.main import main
from taskstate.sidecar import errors


def test_help_keeps_the_command_list_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for command in ("sidecar", "demo", "example", "spark-package", "ls | show"):
        assert f"\n- `taskstate {command}" in text, text
    assert "taskstate.cli.admin" not in text  # a module path is no help to an operator


def test_state_ahead_names_the_task_and_the_component_to_drop() -> None:
    msg = str(errors.state_ahead("jobs/totals/3", 9, 5))
    assert "batch 9" in msg and "batch 5" in msg
    assert "`taskstate drop jobs/totals/3 --yes`" in msg
    assert "`taskstate drop jobs/totals --yes` for every task of the component" in msg
