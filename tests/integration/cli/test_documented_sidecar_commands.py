"""The commands of docs/how-to/sidecar.md start a sidecar as printed (Redis' address swapped)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from taskstate.testing import RedisServer

pytestmark = pytest.mark.integration

SIDECAR_PAGE = Path(__file__).resolve().parents[3] / "docs/how-to/sidecar.md"


def sidecar_commands() -> list[list[str]]:
    section = SIDECAR_PAGE.read_text().split("# Running the sidecar", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [
        shlex.split(line) for line in block.splitlines() if re.match(r"(python|taskstate)", line)
    ]


def test_the_page_lists_the_sidecar_commands() -> None:
    assert len(sidecar_commands()) == 2


@pytest.mark.parametrize("index", [0, 1])
def test_documented_sidecar_command_starts(
    redis_server: RedisServer, tmp_path: Path, index: int
) -> None:
    argv = sidecar_commands()[index]
    if argv[0] == "taskstate":  # the console script pip installed beside this python
        argv = [str(Path(sys.executable).parent / "taskstate"), *argv[1:]]
    else:
        argv = [sys.executable, *argv[1:]]
    argv[argv.index("--redis-url") + 1] = redis_server.url
    listen = argv.index("--listen") + 1
    if argv[listen].startswith("unix://"):
        argv[listen] = f"unix://{tmp_path / 's.sock'}"
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    watchdog = threading.Timer(60, proc.kill)  # a silent hang ends the loop below: EOF
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # log records may come first; EOF if it exits
            seen.append(line)
            if "taskstate sidecar ready" in line:
                break
        assert "taskstate sidecar ready" in seen[-1], "".join(seen)
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
