"""The house stays readable: small files, small classes, no mixins, the CLI on public names.

The limits (docs/architecture.md, "Parts"): no module of client/ or sidecar/ over 400
lines (generated protobuf stubs aside), no class in sidecar/ over 25 methods, none assembled
from several bases (protocols and exceptions aside), and the CLI imports neither a private
client module nor `taskstate.testing`.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAX_LINES = 400
MAX_METHODS = 25


def _sources(part: str) -> list[Path]:
    return sorted(f for f in (ROOT / part).rglob("*.py") if "_pb2" not in f.name)


def test_no_module_of_client_or_sidecar_is_over_400_lines() -> None:
    long = [
        f"{f.relative_to(ROOT)}: {n} lines"
        for part in ("client", "sidecar")
        for f in _sources(part)
        if (n := len(f.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, f"split these along their seams (docs/architecture.md, Parts): {long}"


def _classes(part: str) -> list[tuple[Path, ast.ClassDef]]:
    return [
        (f, node)
        for f in _sources(part)
        for node in ast.walk(ast.parse(f.read_text()))
        if isinstance(node, ast.ClassDef)
    ]


def test_no_class_in_sidecar_has_over_25_methods() -> None:
    big = []
    for f, cls in _classes("sidecar"):
        methods = [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        if len(methods) > MAX_METHODS:
            big.append(f"{f.relative_to(ROOT)}:{cls.name} ({len(methods)})")
    assert not big, f"compose smaller objects instead: {big}"


def test_no_class_in_sidecar_is_assembled_from_mixins() -> None:
    def plain(base: ast.expr) -> bool:  # a protocol, a generic or an error is no mixin
        text = ast.unparse(base)
        return text.startswith(("Protocol", "Generic", "typing.")) or text.endswith(
            ("Error", "Exception")
        )

    mixed = [
        f"{f.relative_to(ROOT)}:{cls.name}({', '.join(ast.unparse(b) for b in cls.bases)})"
        for f, cls in _classes("sidecar")
        if len([b for b in cls.bases if not plain(b)]) > 1
        or any("mixin" in ast.unparse(b).lower() for b in cls.bases)
    ]
    assert not mixed, f"compose instead of inheriting behaviour from several classes: {mixed}"


def test_the_cli_imports_no_private_client_module_and_no_testing_module() -> None:
    bad = []
    for f in _sources("cli"):
        for node in ast.walk(ast.parse(f.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                base = f"taskstate.{node.module}" if node.level else node.module  # ..client._x
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if name.startswith("taskstate.testing") or (
                    name.startswith("taskstate.client.")
                    and any(p.startswith("_") and p != "__init__" for p in parts[2:])
                ):
                    bad.append(f"{f.relative_to(ROOT)}: {name}")
    assert not bad, f"the CLI uses the public client (taskstate.client.admin): {bad}"
