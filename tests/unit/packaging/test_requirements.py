"""What the executors' Python needs is one list: pyproject.toml's `dependencies`.

The docs' `pip install` line for executors (Install) is that list, and that list covers every
third-party module the parts an executor runs (client, sidecar, proto, spark_plugin)
import. tests/e2e/packaging/test_executor_requirements.py installs exactly the docs'
line in a clean venv and starts the sidecar from the py-files zip.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from tests.docs_text import executor_requirements, page_with

ROOT = Path(__file__).resolve().parents[3]
EXECUTOR_PARTS = ("client", "sidecar", "proto", "spark_plugin")
# Imported by those parts but not theirs to bring: Spark puts its own pyspark on every
# worker's path; `packaging` only by pack_env.py, which runs where spark-package runs
# (pip brings it), never on an executor.
NOT_EXECUTOR_DEPENDENCIES = {
    "pyspark": "Spark's own",
    "pyarrow": "Spark's Arrow: pandas UDFs and Python data sources need it ([spark])",
    "packaging": "spark-package only",
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject_dependencies() -> list[str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        deps: list[str] = tomllib.load(f)["project"]["dependencies"]
    return deps


def test_the_docs_list_exactly_pyproject_dependencies() -> None:
    listed = executor_requirements()
    assert sorted(map(str, map(Requirement, listed))) == sorted(
        map(str, map(Requirement, pyproject_dependencies()))
    )


def test_the_docs_parser_sees_a_missing_package() -> None:
    readme = page_with("executor-requirements")
    assert "'grpcio-reflection>=1.85.1' " in readme
    shorter = readme.replace("'grpcio-reflection>=1.85.1' ", "", 1)
    assert len(executor_requirements(shorter)) == len(executor_requirements(readme)) - 1


def provided_distributions(requirements: list[str]) -> set[str]:
    """The distributions the requirements install directly, their extras' included."""
    out = set()
    for line in requirements:
        r = Requirement(line)
        out.add(_canonical(r.name))
        for extra in r.extras:
            for dep in metadata.requires(r.name) or []:
                d = Requirement(dep)
                if d.marker is not None and d.marker.evaluate({"extra": extra}):
                    out.add(_canonical(d.name))
    return out


def third_party_imports(folder: Path) -> dict[str, set[str]]:
    """Top-level module -> the files of `folder` that import it (not stdlib, not ours)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            names = {"grpc", "google"}  # generated: what the stubs import
        else:
            names = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
        for name in names - set(sys.stdlib_module_names) - {"taskstate", "__future__"}:
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_module_the_executor_parts_import_comes_from_a_dependency() -> None:
    provided = provided_distributions(pyproject_dependencies())
    by_module = metadata.packages_distributions()
    missing = {}
    for part in EXECUTOR_PARTS:
        for module, files in third_party_imports(ROOT / part).items():
            if module in NOT_EXECUTOR_DEPENDENCIES:
                continue
            dists = {_canonical(d) for d in by_module.get(module, [])}
            if not dists & provided:
                missing[module] = (sorted(dists), sorted(files))
    assert not missing, f"imported, but no dependency in pyproject.toml brings them: {missing}"
    # the sidecar (with the wire contract it imports) needs every one: none is listed
    # for nothing
    sidecar = {
        _canonical(d)
        for part in ("sidecar", "proto")
        for m in third_party_imports(ROOT / part)
        for d in by_module.get(m, [])
    }
    assert provided <= sidecar, provided - sidecar
