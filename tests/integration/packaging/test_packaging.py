"""`pip install .` gives an importable `taskstate` from any directory (not the editable
install of this checkout), with the Lua scripts and the generated stubs inside."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _tracked_copy(dest: Path) -> Path:
    """The checkout's tracked files only (setuptools writes build/ into its source)."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


def test_pip_install_dot_works_from_another_directory(tmp_path: Path) -> None:
    target = tmp_path / "site"
    source = _tracked_copy(tmp_path / "src")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (target / "taskstate" / "sidecar" / "storage" / "redis" / "lua" / "commit.lua").exists()
    assert (target / "taskstate" / "proto" / "taskstate_pb2.pyi").exists()
    assert not (target / "taskstate" / "__init__.py").exists()  # a namespace package
    assert not (ROOT / "build").exists()
    code = (
        "import taskstate.client as c, taskstate.sidecar.storage.redis.scripts as rb, "
        "taskstate.proto.taskstate_pb2_grpc, taskstate.cli.main;"
        "print(c.__file__); rb.load_all()"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(target))


def test_editable_install_imports_from_any_directory(tmp_path: Path) -> None:
    """bin/setup installs this checkout with `pip install -e`."""
    r = subprocess.run(
        [sys.executable, "-c", "import taskstate.client as c; print(c.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()) == ROOT / "client" / "__init__.py"


def test_a_build_without_isolation_on_an_old_setuptools_names_the_missing_step(
    tmp_path: Path,
) -> None:
    """The README's release build minus its `pip install 'setuptools>=77'` line, in a
    venv whose setuptools predates PEP 639: the error says which step is missing, not
    setuptools' "invalid pyproject.toml config: `project.license`"."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = str(venv / "bin" / "pip")
    # a fresh Python 3.11 venv has setuptools 65.5 already (nothing to download)
    subprocess.run([pip, "install", "-q", "setuptools<77"], check=True, timeout=300)
    source = _tracked_copy(tmp_path / "src")
    r = subprocess.run(
        [pip, "wheel", ".", "--no-deps", "--no-build-isolation", "-w", "dist/"],
        cwd=source, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "TASKSTATE_REQUIRE_JAR": "1"},
    )  # fmt: skip
    assert r.returncode != 0
    assert "taskstate: building needs setuptools>=77" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "pip install 'setuptools>=77'" in r.stdout + r.stderr
