"""The docs say what the code does: every snippet is run or says why not, every code has a
runbook, every cited page exists, and the hand-written tables match their code.

The generated tables (settings, metrics, errors, CLI) cannot drift: scripts/docs_hooks.py
writes them from the code at build time; tests/integration/docs/test_site.py builds the
site with warnings as errors (broken links and anchors included) and opens it in a
browser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts import docs_hooks
from taskstate.client import TaskStateError
from taskstate.client._errors import ERROR_BY_CODE
from taskstate.client._settings import SETTINGS
from tests.docs_text import README, ROOT, pages

FENCE = re.compile(r"^(\s*)```(\w*)", re.MULTILINE)
MARKER = re.compile(r"^\s*<!-- ([a-z][a-z -]*): (.+?) -->\s*$")


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, the line before it that is not blank) of each ```python fence."""
    lines = text.splitlines()
    out, inside = [], False
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if m and not inside and m[2] == "python":
            out.append((i + 1, next((x for x in reversed(lines[:i]) if x.strip()), "")))
        if m:
            inside = not inside
    return out


def problems_of(page: Path, text: str) -> list[str]:
    out = []
    for line_no, before in python_blocks(text):
        where = f"{page.relative_to(ROOT)}:{line_no}"
        m = MARKER.match(before)
        if m is None:
            out.append(f"{where}: no `<!-- not run: REASON -->` or `<!-- NAME: tests/... -->`")
        elif m[1] == "not run":
            if len(m[2].split()) < 3:
                out.append(f"{where}: say why it is not run")
        else:
            tests = re.findall(r"tests/[\w/]+\.py", m[2])
            if not tests:
                out.append(f"{where}: marker {m[1]!r} names no tests/....py that runs it")
            for t in tests:
                path = ROOT / t
                if not path.is_file() or m[1] not in path.read_text():
                    out.append(f"{where}: {t} does not read the block {m[1]!r}")
    return out


def test_every_python_block_names_the_test_that_runs_it_or_says_why_none_does() -> None:
    found = [p for p in pages() for _ in python_blocks(p.read_text())]
    assert len(found) >= 15, found  # the check below reads the blocks that are there
    problems = [x for p in pages() for x in problems_of(p, p.read_text())]
    assert not problems, "\n".join(problems)


def test_a_block_without_its_reason_is_seen() -> None:
    page = README
    assert problems_of(page, "text\n\n```python\nx = 1\n```\n")
    assert problems_of(page, "<!-- not run: -->\n```python\nx = 1\n```\n")
    assert problems_of(page, "<!-- never-read: tests/docs_text.py -->\n```python\n```")
    assert not problems_of(page, "<!-- not run: a fragment of a job -->\n```python\n1\n```\n")


def test_every_error_code_has_its_runbook() -> None:
    text = (ROOT / "docs/operations/runbooks.md").read_text()
    headings = set(re.findall(r"^## ([A-Z_]+)\s*$", text, re.MULTILINE))
    assert set(ERROR_BY_CODE) <= headings, sorted(set(ERROR_BY_CODE) - headings)
    for code, cls in ERROR_BY_CODE.items():
        section = text.split(f"## {code}\n", 1)[1].split("\n## ", 1)[0]
        assert cls.__name__ in section, f"the runbook of {code} does not name {cls.__name__}"


def test_every_docs_page_the_code_and_the_docs_cite_exists() -> None:
    cited: dict[str, set[str]] = {}
    folders = "client sidecar spark_plugin cli demo proto testing tests benchmarks scripts charts"
    for folder in [*folders.split(), "bin", "docs", "requirements"]:
        for f in (ROOT / folder).rglob("*"):
            if f.is_file() and f.suffix in {".py", ".java", ".md", ".yaml", ".txt", ".tpl", ""}:
                for path in re.findall(r"\bdocs/[\w./-]+?\.md\b", f.read_text(errors="ignore")):
                    cited.setdefault(path, set()).add(str(f.relative_to(ROOT)))
    for path in re.findall(r"\bdocs/[\w./-]+?\.md\b", README.read_text()):
        cited.setdefault(path, set()).add("README.md")
    assert len(cited) >= 10, cited
    missing = {p: sorted(by) for p, by in cited.items() if not (ROOT / p).is_file()}
    assert not missing, missing


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 20, links
    assert not [x for x in links if not (ROOT / x).exists()]


def test_the_plugin_settings_table_is_the_confs_the_plugin_reads() -> None:
    java = "\n".join(p.read_text() for p in (ROOT / "spark_plugin/java-src").rglob("*.java"))
    read = set(re.findall(r'"(spark\.taskstate\.[\w.]+)"', java))
    text = (ROOT / "docs/reference/settings.md").read_text()
    rows = dict(re.findall(r"^\| `(spark\.taskstate\.[\w.]+)` \| ([^|]*)\|", text, re.MULTILINE))
    assert set(rows) == read
    for key, default in re.findall(r'conf\.get\("(spark\.taskstate\.[\w.]+)", "(\w+)"\)', java):
        assert default in rows[key], (key, default, rows[key])


def test_the_data_source_columns_table_is_its_schema() -> None:
    from taskstate.spark_plugin.datasource.read import READ_SCHEMA

    text = (ROOT / "docs/reference/data-source.md").read_text()
    table = text.split("## Columns read", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \|", table, re.MULTILINE)
    schema = [tuple(c.split()) for c in READ_SCHEMA.split(", ")] + [("deleted", "boolean")]
    assert rows == schema


@pytest.mark.parametrize(
    ("name", "every"),
    [
        ("settings", [s.env for s in SETTINGS]),
        ("errors", [f"`{code}`" for code in ERROR_BY_CODE]),
        ("metrics", ["taskstate_requests_total{method,code}", "taskstate_redis_up"]),
        ("cli", ["## `taskstate sidecar`", "## `taskstate rescale`", "--redis-url"]),
    ],
)
def test_each_generated_table_names_everything_its_code_defines(
    name: str, every: list[str]
) -> None:
    text = docs_hooks.on_page_markdown(f"x\n<!-- generated: {name} -->\ny")
    assert not [x for x in every if x not in text], text[:2000]
    assert len(text.splitlines()) > len(every)


def test_the_metrics_table_has_every_series_of_the_registry() -> None:
    from taskstate.sidecar.metrics import REGISTRY

    text = docs_hooks.metrics_table()
    names = {m.name for m in REGISTRY.collect()}
    assert len(names) >= 25
    assert not [n for n in names if f"`{n}" not in text]


def test_an_unknown_generated_table_fails_the_build() -> None:
    with pytest.raises(KeyError, match="no generator 'nope'"):
        docs_hooks.on_page_markdown("<!-- generated: nope -->")


def test_every_public_error_class_is_in_the_generated_table() -> None:
    import taskstate.client as client

    public = {
        obj
        for obj in map(lambda name: getattr(client, name), client.__all__)
        if isinstance(obj, type) and issubclass(obj, TaskStateError)
    }
    assert len(public) >= 18
    assert public <= set(ERROR_BY_CODE.values()) | {TaskStateError}
    assert TaskStateError in ERROR_BY_CODE.values()  # its code INTERNAL has a runbook too
