"""Which sidecar the operator commands ask beside a job that runs the executor plugin.

The plugin's sidecars listen on `RUN_DIR/jvm-<executor pid>.sock`, beside each
executor's flush barrier `jvm-<pid>.barrier.sock`; there is no default socket. Real
sidecars (with a real barrier socket) in a private run directory (TASKSTATE_RUN_DIR),
named after live processes as the plugin names them after its JVM.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import ConfigError, LocalContext, TaskState
from taskstate.client.admin import AdminClient, plugin_sidecars
from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration

DEFAULT_SOCKET = Path("/tmp/taskstate-run/sidecar.sock")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    if DEFAULT_SOCKET.exists():
        pytest.fail(
            f"{DEFAULT_SOCKET} exists (a sidecar on the default socket): these tests need "
            "it absent; stop that sidecar",
            pytrace=False,
        )
    d = tmp_path / "run"
    d.mkdir()
    return d


def plugin_like(redis: RedisServer, run_dir: Path, pid: int) -> SidecarProcess:
    """A sidecar as the plugin starts one for JVM `pid`: its socket and its barrier's."""
    return SidecarProcess(
        redis.url,
        run_dir / f"jvm-{pid}.sock",
        extra=["--barrier", str(run_dir / f"jvm-{pid}.barrier.sock"), "--allow-volatile-redis"],
    ).start()


@pytest.fixture
def one_plugin_sidecar(redis_server: RedisServer, run_dir: Path) -> Iterator[SidecarProcess]:
    side = plugin_like(redis_server, run_dir, os.getpid())
    try:
        yield side
    finally:
        side.kill()


def cli(run_dir: Path, *args: str, **env: str) -> Any:
    e = {k: v for k, v in os.environ.items() if k != "TASKSTATE_SIDECAR"}
    e.update(TASKSTATE_RUN_DIR=str(run_dir), **env)
    return subprocess.run(
        [sys.executable, "-m", "taskstate.cli.main", *args],
        capture_output=True, text=True, timeout=120, check=False, env=e,
    )  # fmt: skip


def test_ls_with_no_sidecar_says_to_pass_sidecar_or_redis_url(run_dir: Path) -> None:
    r = cli(run_dir, "ls")
    assert r.returncode == 1
    assert r.stderr.startswith("taskstate ls: no sidecar answers at unix:///tmp/taskstate-run/")
    assert "--sidecar unix:///PATH" in r.stderr and "jvm-<pid>.sock" in r.stderr
    assert "--redis-url URL" in r.stderr
    assert "beside this executor" not in r.stderr  # the task's advice, not an operator's
    r = cli(run_dir, "health")
    assert r.returncode == 1 and "--sidecar unix:///PATH" in r.stderr
    assert "--redis-url" not in r.stderr  # health has no --redis-url


def test_ls_finds_the_one_plugin_sidecar_and_says_so(
    one_plugin_sidecar: SidecarProcess, run_dir: Path, namespace: str
) -> None:
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=one_plugin_sidecar.target) as s:  # fmt: skip
        s["k"] = 1
    # the socket of an executor that was killed (its JVM gone) is left out
    stale = run_dir / "jvm-999999999.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(stale))
    assert plugin_sidecars(str(run_dir)) == [one_plugin_sidecar.target]
    r = cli(run_dir, "ls")
    assert r.returncode == 0, r.stderr
    assert namespace in r.stdout.split()
    assert r.stderr == (
        "taskstate ls: unix:///tmp/taskstate-run/sidecar.sock does not exist; asking the "
        f"executor plugin's sidecar {one_plugin_sidecar.target} (the one running here; "
        "--sidecar chooses)\n"
    )
    # --sidecar and $TASKSTATE_SIDECAR still choose, silently
    r = cli(run_dir, "ls", "--sidecar", one_plugin_sidecar.target)
    assert r.returncode == 0 and r.stderr == "" and namespace in r.stdout.split()
    # a health probe asks only the sidecar it names
    assert cli(run_dir, "health").returncode == 1


def test_two_plugin_sidecars_are_named_not_guessed(
    redis_server: RedisServer, one_plugin_sidecar: SidecarProcess, run_dir: Path
) -> None:
    other = plugin_like(redis_server, run_dir, os.getppid())
    try:
        r = cli(run_dir, "ls")
    finally:
        other.kill()
    assert r.returncode == 2
    assert one_plugin_sidecar.target in r.stderr and other.target in r.stderr
    assert "pass one with --sidecar" in r.stderr and "--redis-url URL" in r.stderr


def test_the_barrier_socket_is_refused_with_the_sidecar_to_pass(
    one_plugin_sidecar: SidecarProcess, run_dir: Path, namespace: str
) -> None:
    barrier = f"unix://{run_dir}/jvm-{os.getpid()}.barrier.sock"
    expected = f"its executor's sidecar is {one_plugin_sidecar.target}\n"
    for r in (cli(run_dir, "ls", "--sidecar", barrier),
              cli(run_dir, "ls", TASKSTATE_SIDECAR=barrier)):  # fmt: skip
        assert r.returncode == 1, r.stderr
        assert r.stderr.startswith("taskstate ls: ") and r.stderr.endswith(expected), r.stderr
        assert "HTTP/2" not in r.stderr
    # a task's client too, before it connects (it would wait for a sidecar that is not there)
    with pytest.raises(ConfigError, match="flush barrier socket"):
        TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                  sidecar=barrier)  # fmt: skip


def test_a_socket_that_is_not_a_sidecar_is_named_as_such(
    one_plugin_sidecar: SidecarProcess, run_dir: Path
) -> None:
    """Not `Failed parsing HTTP/2` as if the sidecar did not answer: the barrier socket
    under another name answers, but not in gRPC."""
    other = run_dir / "other.sock"
    other.symlink_to(run_dir / f"jvm-{os.getpid()}.barrier.sock")
    with AdminClient(f"unix://{other}", timeout_s=10) as admin, pytest.raises(ConfigError) as e:
        admin.namespaces()
    assert f"unix://{other} is not a taskstate sidecar (it does not speak gRPC" in str(e.value)
    r = cli(run_dir, "ls", "--sidecar", f"unix://{other}")
    assert r.returncode == 1 and "is not a taskstate sidecar" in r.stderr, r.stderr


def test_the_frame_lane_is_refused_with_the_sidecar_to_pass_and_not_listed(
    one_plugin_sidecar: SidecarProcess, run_dir: Path, namespace: str
) -> None:
    lane = run_dir / f"jvm-{os.getpid()}.frames.sock"
    assert lane.is_socket()  # the plugin's sidecar serves its lane beside it
    assert plugin_sidecars(str(run_dir)) == [one_plugin_sidecar.target]
    r = cli(run_dir, "ls", "--sidecar", f"unix://{lane}")
    assert r.returncode == 1, r.stderr
    assert f"give the sidecar's own socket, {one_plugin_sidecar.target}" in r.stderr, r.stderr
    with pytest.raises(ConfigError, match="frame lane"):
        TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                  sidecar=f"unix://{lane}")  # fmt: skip
