"""Build hook: the wheel carries the executor plugin jar, compiled when it is built.

`javac --release 17` against the jars of the pyspark in the build environment (see
spark_plugin/package.py). Without javac or pyspark there (pip's isolated builds have
neither) the wheel is built without the jar, with a warning, and `taskstate
spark-package` compiles it on the user's machine instead. Release builds set
TASKSTATE_REQUIRE_JAR=1 and build with `pip wheel --no-build-isolation` in an environment
that has both (README, "Install"); without isolation the build uses that environment's
setuptools, which must read pyproject's `license = "Apache-2.0"` (PEP 639: 77 or later;
a fresh Python 3.11 venv has 65.5):

    pip install 'setuptools>=77'
    TASKSTATE_REQUIRE_JAR=1 pip wheel . --no-deps --no-build-isolation -w dist/
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import setuptools
from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SETUPTOOLS_NEEDED = 77  # pyproject.toml's build-system.requires; PEP 639 license strings

if int(setuptools.__version__.split(".")[0]) < SETUPTOOLS_NEEDED:
    # reached only without build isolation (pip wheel --no-build-isolation): say which
    # step is missing instead of setuptools' "invalid pyproject.toml config: project.license"
    raise SystemExit(
        f"taskstate: building needs setuptools>={SETUPTOOLS_NEEDED} (pyproject.toml's "
        f'license = "Apache-2.0", PEP 639); this environment has setuptools '
        f"{setuptools.__version__}. Run pip install 'setuptools>={SETUPTOOLS_NEEDED}' "
        "first: --no-build-isolation builds with this environment's setuptools."
    )


class BuildPyWithPluginJar(build_py):
    """build_py, then the plugin jar into the built taskstate/spark_plugin/."""

    def run(self) -> None:
        """Copy the packages as build_py does, then compile the jar beside them."""
        super().run()
        spec = importlib.util.spec_from_file_location(
            "_taskstate_package", HERE / "spark_plugin" / "package.py"
        )
        if spec is None or spec.loader is None:
            raise SystemExit("taskstate: spark_plugin/package.py is missing from the source tree")
        package = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(package)
        out = Path(self.build_lib) / "taskstate" / "spark_plugin"
        out.mkdir(parents=True, exist_ok=True)
        try:
            jar = package.build_jar(out, sources=HERE / "spark_plugin")
        except package.PackageError as exc:
            if os.environ.get("TASKSTATE_REQUIRE_JAR") == "1":
                raise SystemExit(f"taskstate: the plugin jar could not be built: {exc}") from None
            print(
                f"WARNING: taskstate wheel built without the executor plugin jar ({exc}); "
                "`taskstate spark-package` will compile it where it runs.",
                file=sys.stderr,
            )
            return
        print(f"taskstate: built {jar}", file=sys.stderr)


setup(cmdclass={"build_py": BuildPyWithPluginJar})
