"""Every folder of Python code (or Lua scripts) is a package the wheel ships.

pyproject.toml lists the packages by hand (each top-level folder maps to a subpackage of
`taskstate`). A folder left out is missing from a normal `pip install` and from
`taskstate-pyfiles.zip`, while an editable install (bin/setup's) still finds it: the
data source's folder was once missed that way, and configure() failed with
ModuleNotFoundError on every non-editable install.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_code_folder_is_a_listed_package_mapped_to_itself() -> None:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed: list[str] = setup["packages"]
    dirs: dict[str, str] = setup["package-dir"]
    assert sorted(dirs) == sorted(listed), "each listed package needs its package-dir entry"
    for name, folder in dirs.items():
        assert (ROOT / folder).is_dir(), f"{name}: {folder} is not a folder"
        assert name == "taskstate." + folder.replace("/", "."), f"{name} maps to {folder}"
    tops = {folder.split("/")[0] for folder in dirs.values()}
    missing = []
    for top in sorted(tops):
        for d in sorted([ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]):
            if "__pycache__" in d.parts or "java-src" in d.parts:
                continue
            if any(d.glob("*.py")) or any(d.glob("*.lua")):
                rel = d.relative_to(ROOT).as_posix()
                if rel not in dirs.values():
                    missing.append(rel)
    assert missing == [], f"folders with code that pyproject.toml does not ship: {missing}"
