"""The dev venv's Spark Python processes import pyspark from site-packages, not from the
zip Spark puts first on their path (scripts/dev_site/, installed by bin/setup)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
MODULE = "_taskstate_dev_pyspark_path"


@pytest.fixture
def dev_path(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("TASKSTATE_DEV_PYSPARK_ZIP", "keep")  # loading it changes nothing
    source = ROOT / "scripts" / "dev_site" / f"{MODULE}.py"
    spec = importlib.util.spec_from_file_location(MODULE, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(tmp_path: Path, py4j: str = "0.10.9.9") -> Path:
    """A site-packages with a pip-installed pyspark (its zips inside) and py4j `py4j`."""
    site = tmp_path / "site"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (lib / "pyspark.zip").write_bytes(b"")
    (lib / "py4j-0.10.9.9-src.zip").write_bytes(b"")
    (site / f"py4j-{py4j}.dist-info").mkdir()
    return site


def test_the_zips_of_this_pyspark_go_and_every_other_entry_stays(
    dev_path: ModuleType, tmp_path: Path
) -> None:
    site = _site(tmp_path)
    lib = site / "pyspark" / "python" / "lib"
    (tmp_path / "link").symlink_to(lib)  # the same zip by another name goes too
    other = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"  # another Spark's
    path = [str(lib / "pyspark.zip"), str(tmp_path / "link" / "py4j-0.10.9.9-src.zip"),
            str(other), "/job/deps.zip", str(site)]  # fmt: skip
    assert dev_path.without_spark_zips(path, str(site)) == [str(other), "/job/deps.zip", str(site)]


def test_py4j_stays_in_its_zip_when_site_packages_holds_another_version(
    dev_path: ModuleType, tmp_path: Path
) -> None:
    site = _site(tmp_path, py4j="0.10.9.7")
    lib = site / "pyspark" / "python" / "lib"
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(site)]
    assert dev_path.without_spark_zips(path, str(site)) == path[1:]


def test_without_pyspark_in_site_packages_the_path_is_as_spark_made_it(
    dev_path: ModuleType, tmp_path: Path
) -> None:
    """A packed executor environment has no pyspark of its own: Spark's zip is its pyspark."""
    site = tmp_path / "site"
    site.mkdir()
    path = ["/spark/python/lib/pyspark.zip", "/spark/python/lib/py4j-0.10.9.9-src.zip"]
    assert dev_path.without_spark_zips(path, str(site)) == path


@pytest.mark.parametrize("switch", ["", "keep"])
def test_the_venvs_python_imports_pyspark_from_site_packages_unless_told_to_keep_the_zip(
    switch: str,
) -> None:
    """As a Spark Python worker starts: the zips first on PYTHONPATH."""
    site = Path(sysconfig.get_paths()["purelib"])
    if not (site / f"{MODULE}.pth").exists():
        pytest.fail(f"{MODULE}.pth is not in {site}: bin/setup installs it (run bin/setup)")
    lib = site / "pyspark" / "python" / "lib"
    (py4j_zip,) = lib.glob("py4j-*-src.zip")
    env = {**os.environ, "PYTHONPATH": f"{lib / 'pyspark.zip'}:{py4j_zip}",
           "TASKSTATE_DEV_PYSPARK_ZIP": switch}  # fmt: skip
    code = "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    pyspark_file, py4j_file = done.stdout.split()
    if switch == "keep":
        assert pyspark_file.startswith(str(lib / "pyspark.zip")), pyspark_file
        assert py4j_file.startswith(str(py4j_zip)), py4j_file
    else:
        assert pyspark_file == str(site / "pyspark" / "__init__.py")
        assert py4j_file == str(site / "py4j" / "__init__.py")
