"""An executor's Python with exactly the documented packages runs the sidecar and a client.

A clean venv outside the tree gets only the `pip install` line for executors
(docs/getting-started/install.md; pinned by requirements/constraints.txt, from the pip
cache), and taskstate comes from
the py-files zip `taskstate spark-package` writes, on PYTHONPATH, as the executor plugin
gives it to the sidecar. In it: `python -m taskstate.sidecar` against a real
redis-server, and a client round trip through that sidecar.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from taskstate.testing import RedisServer
from tests.docs_text import executor_requirements

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]

ROUND_TRIP = Path(__file__).resolve().parents[1] / "jobs" / "round_trip.py"


def run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> str:
    r = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
    )
    assert r.returncode == 0, f"{cmd[:4]} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def test_the_readme_packages_and_the_pyfiles_zip_run_the_sidecar_and_a_client(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    listed = executor_requirements()
    pkg = tmp_path / "pkg"
    run([sys.executable, "-m", "taskstate.cli.main", "spark-package", "--out", str(pkg)],
        dict(os.environ))  # fmt: skip
    pyfiles = pkg / "taskstate-pyfiles.zip"

    venv = tmp_path / "executor-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    base_env = {
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "HOME": os.environ.get("HOME", str(tmp_path)),  # pip's cache: no second download
    }
    run([python, "-m", "pip", "install", "-q", "-c", str(ROOT / "requirements/constraints.txt"),
         *listed], base_env)  # fmt: skip
    env = {**base_env, "PYTHONPATH": str(pyfiles)}
    where = run([python, "-c", "import taskstate.sidecar as s; print(s.__file__)"], env)
    assert where.startswith(str(pyfiles)), where  # the zip's, not the checkout's

    sock = tmp_path / "s.sock"
    log = tmp_path / "sidecar.log"
    with log.open("wb") as err:
        side = subprocess.Popen(
            [python, "-m", "taskstate.sidecar", "--redis-url", redis_server.url,
             "--listen", f"unix://{sock}", "--allow-volatile-redis"],
            env=env, cwd="/", stdout=subprocess.PIPE, stderr=err, start_new_session=True,
        )  # fmt: skip
    try:
        assert side.stdout is not None
        ready = side.stdout.readline().decode()
        assert "ready" in ready, f"the sidecar did not start:\n{log.read_text()[-3000:]}"
        ns = f"exec-{uuid.uuid4().hex[:6]}"
        out = run([python, str(ROUND_TRIP), f"unix://{sock}", ns], env, timeout=120)
        n, batch, client = out.split()
        assert (n, batch) == ("2", "0"), out
        assert client.startswith(str(pyfiles)), client
    finally:
        side.kill()
        side.wait(30)
