"""What the CLI prints around its answers: a closed pipe, error prefixes, the last writer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from taskstate.client import LocalContext, TaskState
from taskstate.testing import SidecarProcess

pytestmark = pytest.mark.integration

TASKSTATE = [sys.executable, "-m", "taskstate.cli.main"]


def big_task(sidecar: SidecarProcess, namespace: str) -> str:
    """A task whose `show` and `export` print far more than a pipe holds (64 KiB)."""
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s.update({f"key-{i:05d}": {"n": i, "pad": "x" * 40} for i in range(5000)})
    return f"{namespace}/c/0"


@pytest.mark.parametrize("command", ["show", "export"])
def test_a_reader_that_stops_early_ends_the_command_quietly(
    sidecar: SidecarProcess, namespace: str, command: str
) -> None:
    """`taskstate show ... | head`: no "[Errno 32] Broken pipe", no traceback."""
    task = big_task(sidecar, namespace)
    what = task if command == "show" else namespace
    p = subprocess.Popen(
        [*TASKSTATE, command, what, "--sidecar", sidecar.target],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    head = [p.stdout.readline() for _ in range(3)]  # what `head -n 3` reads
    p.stdout.close()
    err = p.stderr.read()
    code = p.wait(60)
    assert all(head), head
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception" not in err, err
    if command == "export":  # its progress lines go on on stderr, before the pipe closed
        assert all(line.startswith("taskstate export: ") for line in err.splitlines()), err
    else:
        assert err == ""
    assert code == 1  # Python's convention for EPIPE (the reader did not get everything)


def test_every_error_starts_with_taskstate_and_its_command(
    sidecar: SidecarProcess, namespace: str, tmp_path: Path
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = {
        ("show", f"{namespace}/c/9"): 1,  # no state stored
        ("ls", "bad name!"): 2,
        ("drop", namespace): 2,  # without --yes
        ("set", f"{namespace}/c/0", "k", "{not json"): 2,
        ("import", str(tmp_path / "missing.jsonl")): 1,
        ("rescale", namespace, "--to", "3"): 2,  # no component
    }
    for args, status in cases.items():
        r = subprocess.run([*TASKSTATE, *args, "--sidecar", sidecar.target],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert r.returncode == status, (args, r.returncode, r.stderr)
        assert r.stderr.startswith(f"taskstate {args[0]}: "), (args, r.stderr)
        assert r.stdout == "", (args, r.stdout)
    r = subprocess.run([*TASKSTATE, "spark-package", "--out", str(a_file)],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 1 and r.stderr.startswith("taskstate spark-package: "), r.stderr


def test_the_last_writer_has_no_empty_executor(sidecar: SidecarProcess, namespace: str) -> None:
    """Outside Spark, and in Spark's local mode, a worker has no executor id."""
    with TaskState(LocalContext(0, batch_id=0), component="c", namespace=namespace,
                   sidecar=sidecar.target) as s:  # fmt: skip
        s["k"] = 1
    r = subprocess.run([*TASKSTATE, "show", f"{namespace}/c/0", "--sidecar", sidecar.target],
                       capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    writer = next(line for line in r.stdout.splitlines() if line.startswith("last writer:"))
    assert re.fullmatch(r"last writer:\s+host=\S+ attempt=\d+ pid=\d+", writer), writer
