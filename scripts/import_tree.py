"""The checkout's folders under their import names, for tools that find modules by path.

Each top-level folder is a subpackage of the namespace package `taskstate`
(pyproject.toml's package-dir), so `.import-tree/taskstate/X` links to `X`; `tests`,
`benchmarks` and `scripts` are packages of their own beside it. mypy reads the code
through this tree (scripts/typecheck.sh runs this file), and so does mkdocstrings
(mkdocs.yml loads this file as a hook, which builds the tree before any page is read).
The tree is hidden, and not under build/, which belongs to pip's builds.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN_PACKAGES = ("tests", "benchmarks", "scripts")


def build(root: Path = ROOT) -> Path:
    """Make (or bring up to date) `root/.import-tree`; its path."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    top = {name.split(".")[1]: folder for name, folder in setuptools["package-dir"].items()
           if name.count(".") == 1}  # fmt: skip
    tree = root / ".import-tree"
    want = {tree / "taskstate" / name: root / folder for name, folder in top.items()}
    want |= {tree / name: root / name for name in OWN_PACKAGES}
    (tree / "taskstate").mkdir(parents=True, exist_ok=True)
    for folder in (tree, tree / "taskstate"):
        for link in folder.iterdir():  # a folder no longer in pyproject.toml
            if link.is_symlink() and link not in want:
                link.unlink()
    for link, target in want.items():
        if not (link.is_symlink() and link.resolve() == target.resolve()):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    return tree


TREE = build()

if __name__ == "__main__":
    print(TREE)
