"""What tests read out of the README and the docs, so that they say what the tests run.

A code block that tests run or compare follows an HTML comment marker (`<!-- NAME: ...
-->`, invisible on GitHub and on the site) that names the test that reads it; each
marker is in one file of README.md and docs/. A Python block that no test runs follows
`<!-- not run: REASON -->` (tests/unit/docs/test_docs.py checks that every one does).
"""

from __future__ import annotations

import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def page_with(marker: str) -> str:
    """The text of the one page of README.md and docs/ that has `<!-- marker:`."""
    head = f"<!-- {marker}:"
    found = [p for p in pages() if head in p.read_text()]
    assert len(found) == 1, f"{head!r} must be in exactly one page, found in {found}"
    return found[0].read_text()


def block_after(marker: str, text: str | None = None, *, code: bool = False) -> str:
    """The fenced code block that follows `<!-- marker:` (in `text`, or in the one page
    that has it): its lines unindented, or as they are with `code` (Python)."""
    head = f"<!-- {marker}:"
    text = page_with(marker) if text is None else text
    assert head in text, f"no {head!r} marker"
    after = text.split(head, 1)[1]
    body = after.split("```", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    if code:
        return body
    return "\n".join(line.strip() for line in body.splitlines()) + "\n"


def executor_requirements(text: str | None = None) -> list[str]:
    """The requirement arguments of the docs' `pip install` line for executors."""
    words = shlex.split(block_after("executor-requirements", text).replace("\\\n", " "))
    assert words[:2] == ["pip", "install"], words[:2]
    return words[2:]
