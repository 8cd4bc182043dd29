"""`taskstate spark-package --out DIR`: what a spark-submit needs to run taskstate.

Writes:
- `DIR/taskstate-plugin.jar`: the executor plugin. The wheel carries it, compiled with
  `javac --release 17` against pyspark's jars when the wheel was built (setup.py); an
  install from a source tree without it compiles it here, against the installed pyspark
  (no Maven);
- `DIR/taskstate-pyfiles.zip`: the pure-Python `taskstate` package for `--py-files`;
- with `--pack-env`, `DIR/taskstate-env.tar.gz`: the executors' Python environment
  (grpcio and friends are compiled and cannot ride in a zip), without pyspark, for
  `--archives ...#taskstate-env` (pack_env.py).

It prints the spark-submit flags; with `--connect`, the flags of a Spark Connect server
(`start-connect-server.sh`) instead, and how the Python code reaches a Connect server.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

JAR_NAME = "taskstate-plugin.jar"
ZIP_NAME = "taskstate-pyfiles.zip"
PLUGIN_CLASS = "io.taskstate.spark.TaskStatePlugin"
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# the example job (demo/) rides along: `taskstate example` on a cluster pickles its functions
SUBPACKAGES = ("client", "sidecar", "proto", "spark_plugin", "demo", "cli", "testing")


class PackageError(RuntimeError):
    """A packaging step could not run; the message says what to install."""


def _pyspark_jars() -> Path:
    try:
        import pyspark
    except ImportError:
        raise PackageError("pyspark is not installed: pip install 'taskstate[spark]'") from None
    jars = Path(pyspark.__file__).parent / "jars"
    if not jars.is_dir():
        raise PackageError(f"no jars/ folder inside pyspark at {jars.parent}")
    return jars


def _java_sources(root: Path | None = None) -> list[Path]:
    """The plugin's classes: the plugin, the sidecar supervisor and the flush barrier.

    `root`: the spark_plugin folder (setup.py's, when the wheel is built); default: the
    installed package's.
    """
    if root is None:
        root = Path(str(resources.files("taskstate.spark_plugin")))
    return sorted((root / "java-src/io/taskstate/spark").glob("*.java"))


def prebuilt_jar() -> Path | None:
    """The plugin jar the wheel carries (built when the wheel was), if it does."""
    jar = Path(str(resources.files("taskstate.spark_plugin").joinpath(JAR_NAME)))
    return jar if jar.is_file() else None


def plugin_jar(out_dir: Path) -> tuple[Path, bool]:
    """DIR/taskstate-plugin.jar: the wheel's, copied; else compiled here. (path, copied)."""
    jar = prebuilt_jar()
    if jar is None:
        return build_jar(out_dir), False
    out = out_dir / JAR_NAME
    shutil.copyfile(jar, out)
    return out, True


def build_jar(out_dir: Path, sources: Path | None = None) -> Path:
    """Compile the plugin against pyspark's jars and write DIR/taskstate-plugin.jar."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise PackageError(
            "javac and jar are needed to build the plugin: install a JDK 17 "
            "(Debian: apt-get install openjdk-17-jdk-headless)"
        )
    out = out_dir / JAR_NAME
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            javac,
            "--release",
            "17",
            "-cp",
            f"{_pyspark_jars()}/*",
            "-d",
            tmp,
            *map(str, _java_sources(sources)),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
        if r.returncode != 0:
            raise PackageError(f"javac failed:\n{r.stderr}")
        r = subprocess.run(  # noqa: S603 - our own jar command
            [jar, "cf", str(out), "-C", tmp, "."], capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            raise PackageError(f"jar failed:\n{r.stderr}")
    return out


def build_pyfiles(out_dir: Path) -> Path:
    """Zip the pure-Python taskstate package (as `taskstate/...`) for --py-files."""
    out = out_dir / ZIP_NAME
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        # zipimport does not find namespace packages: inside the zip, taskstate is regular
        z.writestr("taskstate/__init__.py", '"""taskstate, from taskstate-pyfiles.zip."""\n')
        for sub in SUBPACKAGES:
            root = Path(str(resources.files(f"taskstate.{sub}")))
            for path in sorted(root.rglob("*")):
                rel = path.relative_to(root)
                if path.is_dir() or "__pycache__" in rel.parts or path.suffix in (".pyc",):
                    continue
                if rel.parts[0] == "java-src":
                    continue
                z.write(path, f"taskstate/{sub}/{rel.as_posix()}")
    return out


def submit_flags(out_dir: Path, redis_url: str, env: Path | None) -> list[str]:
    """The spark-submit flags that use what was written (client and cluster mode)."""
    flags = [
        f"--jars {out_dir / JAR_NAME}",
        f"--py-files {out_dir / ZIP_NAME}",
        f"--conf spark.plugins={PLUGIN_CLASS}",
        f"--conf spark.taskstate.redisUrl={redis_url}",
        "--conf spark.speculation=false",
    ]
    if env is not None:
        flags += [
            f"--archives {env}#taskstate-env",
            # the executors' Python workers and the plugin's sidecar; in cluster mode the
            # driver too (it runs where the archive is unpacked)
            "--conf spark.pyspark.python=./taskstate-env/bin/python",
            "--conf spark.taskstate.python=./taskstate-env/bin/python",
        ]
    return flags


def connect_server_flags(out_dir: Path, redis_url: str, env: Path | None) -> list[str]:
    """The flags of a Spark Connect server's start command (start-connect-server.sh).

    No `--py-files`: a Connect session's Python workers do not see the server's
    (seen on Spark 4.3); the server's Python has taskstate installed instead, or a
    client ships the zip with `spark.addArtifacts` (connect_python_notes).
    """
    return [f for f in submit_flags(out_dir, redis_url, env) if not f.startswith("--py-files")]


def connect_python_notes(out_dir: Path) -> list[str]:
    """How the Python code reaches a Connect server's workers (docs/how-to/spark-connect.md)."""
    return [
        "the server's Python (its executors' workers, the plugin's sidecar, and the "
        "Python process that runs foreachBatch functions) must import taskstate: "
        "install it there from this checkout or its wheel (taskstate is not on PyPI): "
        "pip install '/path/to/taskstate[spark]' (or use --pack-env for the executors)",
        "task code alone (no foreachBatch function that uses taskstate) can also get it "
        "from the client: spark.addArtifacts("
        f"'{out_dir / ZIP_NAME}', pyfile=True)",
        "in the client: taskstate.spark_plugin.configure(spark, namespace='my-job') "
        "checks the server and names what it lacks",
    ]


def client_mode_flags(env: Path | None) -> list[str]:
    """What client mode adds: the driver runs here, where ./taskstate-env does not exist."""
    if env is None:
        return []
    return [f"--conf spark.pyspark.driver.python={sys.executable}"]


def _progress(text: str) -> None:
    print(f"taskstate spark-package: {text}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Build the plugin jar, the py-files zip and (optionally) a packed environment."""
    # (imported here: setup.py loads this file on its own, outside its package)
    from .pack_env import PackEnvError, pack_env

    p = argparse.ArgumentParser(
        prog="taskstate spark-package",
        description=__doc__.replace("`", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the list a list
    )
    p.add_argument("--out", required=True, help="directory to write into")
    p.add_argument(
        "--pack-env",
        action="store_true",
        help="also pack what the executors' Python needs (taskstate's dependencies, pandas, "
        "pyarrow; not pyspark) for --archives",
    )
    p.add_argument(
        "--redis-url",
        default="redis://REDIS-HOST:6379/0",
        help="only used to print the spark-submit flags",
    )
    p.add_argument(
        "--connect",
        action="store_true",
        help="print the flags of a Spark Connect server (start-connect-server.sh) instead",
    )
    ns = p.parse_args(argv)
    out_dir = Path(ns.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        jar, copied = plugin_jar(out_dir)
        how = "the wheel's prebuilt jar" if copied else "compiled here with javac"
        print(f"wrote {jar} ({how})")
        pyfiles = build_pyfiles(out_dir)
        print(f"wrote {pyfiles}")
        env = None
        if ns.pack_env:
            env, dists = pack_env(out_dir, on_progress=_progress)
            size = env.stat().st_size / 2**20
            print(f"wrote {env} ({size:.0f} MiB: {', '.join(dists)}; no pyspark)")
    except BrokenPipeError:
        raise  # the reader of stdout went away: taskstate's main() ends quietly
    except (PackageError, PackEnvError, OSError) as exc:
        print(f"taskstate spark-package: {exc}", file=sys.stderr)
        return 1
    if ns.connect:
        flags = connect_server_flags(out_dir, ns.redis_url, env)
        print("\nSpark Connect server flags (start-connect-server.sh, or spark-submit --class "
              f"{CONNECT_SERVER_CLASS} spark-internal):\n  " + " \\\n  ".join(flags))  # fmt: skip
        print("Python code:\n  - " + "\n  - ".join(connect_python_notes(out_dir)))
        return 0
    print("\nspark-submit flags:\n  " + " \\\n  ".join(submit_flags(out_dir, ns.redis_url, env)))
    if env is not None:
        print("in client mode (the driver runs here), also:\n  " + "\n  ".join(
            client_mode_flags(env)))  # fmt: skip
    return 0
