"""`spark-package --pack-env` says how far it is while it packs (about 20 s in full)."""

from __future__ import annotations

import tarfile
from importlib import metadata
from pathlib import Path

import pytest

from taskstate.spark_plugin import pack_env


def test_packing_reports_the_total_then_each_tenth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = [metadata.distribution("tenacity"), metadata.distribution("redis")]  # many files
    monkeypatch.setattr(pack_env, "closure", lambda roots: small)
    said: list[str] = []
    out, dists = pack_env.pack_env(tmp_path, on_progress=said.append)
    assert said[0].startswith("packing 2 distributions (") and str(out) in said[0]
    tenths = [int(s.split("%")[0].removeprefix("packed ")) for s in said[1:]]
    assert tenths == sorted(tenths) and tenths[-1] == 100 and len(tenths) >= 5, said
    assert all(" (at redis " in s or " (at tenacity " in s for s in said[1:]), said
    assert [d.split()[0] for d in dists] == ["tenacity", "redis"]
    with tarfile.open(out) as tar:
        assert any(n.endswith("/tenacity/__init__.py") for n in tar.getnames())
    # gzip's header says neither "best" (tarfile's default, level 9: 2.8 times the time
    # of level 6 for 0.7% less) nor "fastest" (level 1: 15% more)
    assert out.read_bytes()[8] == 0


def test_spark_package_prints_the_progress_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from taskstate.spark_plugin import package

    small = [metadata.distribution("tenacity"), metadata.distribution("redis")]
    monkeypatch.setattr(pack_env, "closure", lambda roots: small)
    jar = tmp_path / package.JAR_NAME
    jar.write_bytes(b"")  # the jar is not under test here
    monkeypatch.setattr(package, "plugin_jar", lambda out_dir: (jar, True))
    assert package.main(["--out", str(tmp_path), "--pack-env"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert lines[0].startswith("taskstate spark-package: packing 2 distributions"), err
    assert lines[-1] == "taskstate spark-package: packed 100% (at redis " + small[1].version + ")"
    assert "--archives" in out and "packed" not in out  # stdout keeps the flags only
