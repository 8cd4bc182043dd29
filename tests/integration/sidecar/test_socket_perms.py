"""The sidecar's Unix sockets (gRPC and the frame lane beside it): owner and group only by
default; mode and group set."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from taskstate.testing import RedisServer, SidecarProcess

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("extra", "mode"), [((), 0o660), (("--socket-mode", "0600"), 0o600)])
def test_socket_mode(
    redis_server: RedisServer, tmp_path: Path, extra: tuple[str, ...], mode: int
) -> None:
    side = SidecarProcess(redis_server.url, tmp_path / "s.sock", extra=list(extra)).start()
    try:
        for path in (side.socket, tmp_path / "s.frames.sock"):
            st = os.stat(path)
            assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == mode, path
    finally:
        side.kill()


def test_socket_group(redis_server: RedisServer, tmp_path: Path) -> None:
    gid = os.getgroups()[-1] if os.getgroups() else os.getgid()
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock", extra=["--socket-group", str(gid)]
    ).start()
    try:
        assert os.stat(side.socket).st_gid == gid
        assert os.stat(tmp_path / "s.frames.sock").st_gid == gid
    finally:
        side.kill()


def test_unknown_socket_group_is_refused(redis_server: RedisServer, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "taskstate.sidecar", "--redis-url", redis_server.url,
         "--listen", f"unix://{tmp_path}/s.sock", "--socket-group", "no-such-group-xyz"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "no group named 'no-such-group-xyz'" in r.stderr
