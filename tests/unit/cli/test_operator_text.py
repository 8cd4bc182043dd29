"""What operators read: `taskstate --help` and the fix an error names."""

from __future__ import annotations

import argparse

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


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    from taskstate.cli.admin import COMMANDS, build_parser
    from taskstate.demo import example
    from taskstate.demo import trending as demo
    from taskstate.sidecar.cli import add_arguments

    sidecar = argparse.ArgumentParser(prog="taskstate sidecar")
    add_arguments(sidecar)
    out = [(f"taskstate {c}", build_parser(c)) for c in COMMANDS]
    out += [("taskstate sidecar", sidecar), ("taskstate demo", demo.build_parser()),
            ("taskstate example", example.build_parser())]  # fmt: skip
    return out


def test_every_option_of_every_command_says_what_it_does() -> None:
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, parser in _parsers()
        for a in parser._actions
        if a.help is None and a.dest != "help"
    ]
    assert missing == [], f"options without help text: {missing}"
