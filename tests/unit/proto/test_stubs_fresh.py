from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_generated_grpc_stubs_match_the_proto() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr + r.stdout


def test_check_detects_a_stale_stub(tmp_path: Path) -> None:
    """The staleness check must be able to fail: compare against a modified proto."""
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "proto", copy / "proto")
    shutil.copytree(ROOT / "scripts", copy / "scripts")
    p = copy / "proto" / "taskstate.proto"
    p.write_text(p.read_text().replace("message Entry {", "message Entry {\n  int32 extra = 9;"))
    r = subprocess.run(
        [sys.executable, str(copy / "scripts" / "gen_protos.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1 and "stale" in r.stderr
