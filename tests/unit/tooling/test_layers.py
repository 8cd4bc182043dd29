"""The parts import each other only as docs/architecture.md says, and never in a circle."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

ALLOWED = {
    "proto": set(),
    "client": {"proto"},
    "sidecar": {"proto"},
    "spark_plugin": {"proto", "client"},
    "testing": {"proto", "client", "sidecar"},
    "demo": {"proto", "client", "sidecar", "spark_plugin", "testing"},
    "cli": {"proto", "client", "sidecar", "spark_plugin", "demo"},
}
# a part that may use one module of a part above the line: the data source starts a private
# sidecar process for option redisUrl (as `taskstate --redis-url` does), nothing else of it
NARROW = {("spark_plugin", "taskstate.sidecar.process")}


def _modules() -> dict[str, Path]:
    mods = {}
    for part in ALLOWED:
        for f in (ROOT / part).rglob("*.py"):
            name = ".".join(("taskstate", *f.relative_to(ROOT).with_suffix("").parts))
            mods[name.removesuffix(".__init__")] = f
    return mods


def _imports(name: str, f: Path, module_level: bool) -> set[str]:
    """What a module imports (`taskstate.*` names; relative imports resolved)."""
    tree = ast.parse(f.read_text())
    nodes = tree.body if module_level else list(ast.walk(tree))
    package = name if f.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for n in nodes:
        if isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - n.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in n.names)
        elif isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
    return {m for m in out if m.startswith("taskstate.")}


def test_each_part_imports_only_the_parts_below_it() -> None:
    wrong = []
    for name, f in _modules().items():
        part = name.split(".")[1]
        for target in _imports(name, f, module_level=False):
            other = target.split(".")[1]
            narrow = any(target.startswith(m) for p, m in NARROW if p == part)
            if other != part and other not in ALLOWED[part] and not narrow:
                wrong.append(f"{name} imports {target}")
    assert not wrong, wrong


def test_no_import_circles() -> None:
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, f in mods.items():
        graph[name] = {m for m in _imports(name, f, module_level=True) if m in mods} - {name}
    circles = []
    for start in mods:  # a circle: a module that reaches itself through its imports
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m == start:
                circles.append(start)
                break
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
    assert not circles, circles


# the one window into another part's private modules: taskstate.testing.worker shows tests
# and fault harnesses what a worker process holds (client/_cache, _buffer, _context), so
# that nothing else reaches into them
PRIVATE_WINDOWS = {("taskstate.testing.worker", "taskstate.client")}


def test_no_part_imports_another_parts_private_modules() -> None:
    wrong = []
    for name, f in _modules().items():
        part = name.split(".")[1]
        for target in _imports(name, f, module_level=False):
            other = ".".join(target.split(".")[:2])
            private = any(p.startswith("_") for p in target.split(".")[2:])
            if other.split(".")[1] != part and private and (name, other) not in PRIVATE_WINDOWS:
                wrong.append(f"{name} imports {target}")
    assert not wrong, wrong
