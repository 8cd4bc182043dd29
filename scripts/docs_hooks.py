"""MkDocs hooks: the reference tables, generated from the code that defines each.

A page asks for a table with a line `<!-- generated: NAME -->`; the hook puts the table
there at build time, so the settings, metrics, errors and CLI pages cannot drift from
the code (mkdocs.yml names this file under `hooks:`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable
from typing import Any

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def settings_table() -> str:
    """The client's settings (taskstate.client._settings.SETTINGS)."""
    from taskstate.client._settings import SETTINGS

    rows = ["| environment | meaning | default | argument / Spark local property |"]
    rows.append("| --- | --- | --- | --- |")
    for s in SETTINGS:
        default = s.shown or f"`{s.default}`"
        where = [f"`{s.argument}=`"] if s.argument else []
        if s.local_property:
            where.append(f"`{s.local_property}` (`spark.{s.local_property}` under Connect)")
        rows.append(f"| `{s.env}` | {_cell(s.meaning)} | {default} | {', '.join(where)} |")
    return "\n".join(rows)


def metrics_table() -> str:
    """The sidecar's Prometheus series (taskstate.sidecar.metrics), in definition order."""
    from prometheus_client.metrics import MetricWrapperBase

    from taskstate.sidecar import metrics

    rows = ["| series | type | meaning |", "| --- | --- | --- |"]
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            kind = value._type  # noqa: SLF001 - prometheus_client has no public accessor
            labels = value._labelnames  # noqa: SLF001
            name = value._name + ("_total" if kind == "counter" else "")  # noqa: SLF001
            help_text = value._documentation  # noqa: SLF001
        elif isinstance(value, metrics.InFlight):
            kind, labels, name, help_text = "gauge", value.labels, value.name, value.documentation
        else:
            continue
        series = f"{name}{{{','.join(labels)}}}" if labels else name
        rows.append(f"| `{series}` | {kind} | {_cell(help_text)} |")
    return "\n".join(rows)


def errors_table() -> str:
    """Every error a task or an operator's tool can get, with its code and when."""
    from taskstate.client._errors import ERROR_BY_CODE

    rows = ["| error | code | when |", "| --- | --- | --- |"]
    for code, cls in ERROR_BY_CODE.items():
        doc = (cls.__doc__ or "").strip().split("\n\n")
        when = " ".join(part.strip() for part in doc)
        anchor = f"../operations/runbooks.md#{code.lower().replace('_', '-')}"
        rows.append(f"| [`{cls.__name__}`]({anchor}) | `{code}` | {_cell(when)} |")
    return "\n".join(rows)


def cli_reference() -> str:
    """`taskstate --help` and each command's `--help`, as argparse prints them."""
    from taskstate.cli.main import COMMANDS, main

    os.environ["COLUMNS"] = "88"  # argparse wraps its help to the terminal's width
    out = []
    for command in ("", *COMMANDS):
        text = io.StringIO()
        with (
            contextlib.redirect_stdout(text),
            contextlib.suppress(SystemExit),
        ):
            main([command, "--help"] if command else ["--help"])
        title = f"taskstate {command}".strip()
        out.append(f"## `{title}`\n\n```text\n{text.getvalue().rstrip()}\n```\n")
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "settings": settings_table,
    "metrics": metrics_table,
    "errors": errors_table,
    "cli": cli_reference,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each `<!-- generated: NAME -->` line with its table."""

    def table(m: re.Match[str]) -> str:
        name = m[1]
        if name not in GENERATORS:
            raise KeyError(f"no generator {name!r}; the known ones: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(table, markdown)
