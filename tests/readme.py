"""What tests read out of the README, so that the README says what the tests run.

A README code block that tests run or compare follows an HTML comment marker
(`<!-- NAME: ... -->`, invisible on GitHub) that names the test that reads it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def block_after(marker: str, text: str | None = None, *, code: bool = False) -> str:
    """The fenced code block that follows `<!-- marker:`: its lines unindented, or as
    they are with `code` (Python)."""
    text = README.read_text() if text is None else text
    head = f"<!-- {marker}:"
    assert head in text, f"README.md has no {head!r} marker"
    after = text.split(head, 1)[1]
    body = after.split("```", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    if code:
        return body
    return "\n".join(line.strip() for line in body.splitlines()) + "\n"


def executor_requirements(text: str | None = None) -> list[str]:
    """The requirement arguments of the README's `pip install` line for executors."""
    words = shlex.split(block_after("executor-requirements", text).replace("\\\n", " "))
    assert words[:2] == ["pip", "install"], words[:2]
    return words[2:]


def section(title: str, text: str | None = None) -> str:
    """The README's section under the heading `title` (up to the next heading)."""
    text = README.read_text() if text is None else text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip("#").strip() == title)
    out = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        out.append(line)
    return "\n".join(out)


def error_table(text: str | None = None) -> dict[str, str]:
    """The README's error table ("Errors"): class name -> code."""
    rows = {}
    for line in section("Errors", text).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0].endswith("Error`"):
            rows[cells[0].strip("`")] = cells[1]
    return rows
