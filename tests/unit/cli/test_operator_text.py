"""What operators read: `taskstate --help` and the fix an error names."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from taskstate.cli.main import main
from taskstate.sidecar import errors


def test_help_keeps_the_command_list_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for command in ("sidecar", "demo", "example", "spark-package", "ls | show"):
        assert f"\n- taskstate {command}" in text, text
    assert "taskstate.cli.admin" not in text  # a module path is no help to an operator
    assert "`" not in text  # Markdown is no help on a terminal


def help_text(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*args, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_spark_package_help_keeps_its_list_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_text(capsys, "spark-package")
    for item in ("DIR/taskstate-plugin.jar:", "DIR/taskstate-pyfiles.zip:", "with --pack-env,"):
        assert f"\n- {item}" in text, text
    assert "`" not in text


def test_every_command_has_a_description_and_no_markdown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [n for n, _ in _parsers()] + ["taskstate spark-package"]:
        command = name.removeprefix("taskstate ")
        text = help_text(capsys, command)
        assert "`" not in text, (name, text)
        description = text.split("\n\n")[1]  # usage, then the description, then options
        assert not description.startswith(("options:", "positional arguments:")), (name, text)
        assert len(description.split()) >= 5, (name, description)


def test_demo_and_example_help_show_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    parsers = dict(_parsers())
    for name in ("taskstate demo", "taskstate example"):
        text = " ".join(help_text(capsys, name.removeprefix("taskstate ")).split())
        for a in parsers[name]._actions:
            if a.help == argparse.SUPPRESS or not a.option_strings or a.dest == "help":
                continue
            if a.default in (None, ""):
                assert "(default: " in (a.help or ""), (name, a.option_strings, a.help)
            else:
                assert f"default {a.default}" in text, (name, a.option_strings, text)


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


def test_a_bad_socket_mode_says_what_a_mode_looks_like(capsys: pytest.CaptureFixture[str]) -> None:
    from taskstate.sidecar.cli import _socket_mode

    assert _socket_mode("0660") == 0o660 and _socket_mode("600") == 0o600
    for bad in ("999", "0660x", "1000", "-1"):  # not octal, or past 0777
        with pytest.raises(argparse.ArgumentTypeError, match="not an octal file mode"):
            _socket_mode(bad)


def test_a_rescale_that_loses_its_sidecar_says_how_to_finish_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "1")
    sidecar = f"unix://{tmp_path}/none.sock"
    assert main(["rescale", "ns/comp", "--to", "4", "--sidecar", sidecar]) == 1
    err = capsys.readouterr().err
    assert "run the same command again to finish it" in err, err
    assert main(["ls", "--sidecar", sidecar]) == 1  # other commands have nothing to finish
    assert "finish it" not in capsys.readouterr().err
