"""Who may reach the sidecar and which state they may touch, against the real sidecar."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskstate.client import (
    LocalContext,
    PermissionDeniedError,
    SidecarUnavailableError,
    TaskState,
    UnauthenticatedError,
    _cache,
)
from taskstate.sidecar.storage.redis.keys import data_key, namespace_key
from taskstate.testing import RedisServer, SidecarProcess
from taskstate.testing.topologies import TlsMaterial, make_tls_material

from ..conftest import snapshot

pytestmark = pytest.mark.integration

TOKEN_A = "token-for-job-a-" + "a" * 24
TOKEN_OPS = "token-for-operators-" + "o" * 24


def start_sidecar(
    redis: RedisServer, tmp: Path, *extra: str, env: dict[str, str] | None = None
) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "taskstate.sidecar", "--redis-url", redis.url,
         "--listen", f"unix://{tmp}/refused.sock", *extra],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip


def tcp_address(side: SidecarProcess) -> str:
    m = re.search(r"(tcp://\S+)", side.ready_line)
    assert m, side.ready_line
    return m.group(1)


def ts(sidecar: str, ns: str, batch: int = 0) -> TaskState:
    return TaskState(LocalContext(0, batch_id=batch), component="c", namespace=ns, sidecar=sidecar)


@pytest.fixture(autouse=True)
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused TLS handshake looks like an unreachable sidecar: do not retry it for 30 s."""
    monkeypatch.setenv("TASKSTATE_RETRY_DEADLINE", "1")
    monkeypatch.setenv("TASKSTATE_TIMEOUT", "5")


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("tls"))


# -- listeners --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "says"),
    [
        ("tcp://0.0.0.0:0", "Plaintext is allowed only on a loopback address"),
        ("tcp://127.0.0.1:0", "--insecure-tcp-loopback"),
    ],
)
def test_plaintext_tcp_is_refused_at_start(
    redis_server: RedisServer, tmp_path: Path, listen: str, says: str
) -> None:
    r = start_sidecar(redis_server, tmp_path, "--listen", listen)
    assert r.returncode == 2, r.stderr
    assert "would be plaintext" in r.stderr and says in r.stderr


def test_plaintext_loopback_only_when_asked(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> None:
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock",
        extra=["--listen", "tcp://127.0.0.1:0", "--insecure-tcp-loopback"],
    ).start()  # fmt: skip
    try:
        with ts(tcp_address(side), namespace) as s:
            s["a"] = 1
        assert redis_server.client().hget(data_key(namespace, "c", 0), "a") == b"1"
    finally:
        side.kill()


def test_tls_listener_and_mutual_tls(
    redis_server: RedisServer,
    tmp_path: Path,
    tls: TlsMaterial,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock",
        extra=["--listen", "tcp://127.0.0.1:0", "--tls-cert", str(tls.server_cert),
               "--tls-key", str(tls.server_key), "--tls-client-ca", str(tls.ca)],
    ).start()  # fmt: skip
    addr = tcp_address(side)
    try:
        # no TLS at all: the handshake fails, nothing is written
        with pytest.raises(SidecarUnavailableError):
            ts(addr, namespace).__enter__()
        # TLS, but no client certificate: refused by mutual TLS
        monkeypatch.setenv("TASKSTATE_SIDECAR_TLS_CA", str(tls.ca))
        with pytest.raises(SidecarUnavailableError):
            ts(addr, namespace).__enter__()
        # nothing written (the namespace's record is the fixture's)
        assert redis_server.client().keys(f"*{namespace}*") == [namespace_key(namespace).encode()]
        # with the client certificate: served
        monkeypatch.setenv("TASKSTATE_SIDECAR_TLS_CERT", str(tls.client_cert))
        monkeypatch.setenv("TASKSTATE_SIDECAR_TLS_KEY", str(tls.client_key))
        with ts(addr, namespace) as s:
            s["a"] = 1
        _cache.sessions.clear()
        with ts(addr, namespace, 1) as s:
            assert s["a"] == 1
    finally:
        side.kill()


# -- tokens -----------------------------------------------------------------------------


@pytest.fixture
def guarded(
    redis_server: RedisServer, tmp_path: Path, namespace: str
) -> Iterator[tuple[SidecarProcess, str, str]]:
    """A sidecar with tokens: job A may touch namespace A only; operators everything."""
    ns_a, ns_b = f"{namespace}-a", f"{namespace}-b"
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [
        {"name": "job-a", "token": TOKEN_A, "namespaces": [ns_a]},
        {"name": "operators", "token": TOKEN_OPS, "namespaces": ["*"]},
    ]}))  # fmt: skip
    side = SidecarProcess(
        redis_server.url, tmp_path / "s.sock", extra=["--tokens-file", str(tokens)]
    ).start()
    try:
        yield side, ns_a, ns_b
    finally:
        side.kill()


def token_file(tmp_path: Path, token: str) -> Path:
    p = tmp_path / f"tok-{token[10:16]}"
    p.write_text(token + "\n")
    return p


def test_a_token_touches_only_its_namespaces(
    guarded: tuple[SidecarProcess, str, str],
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    side, ns_a, ns_b = guarded
    monkeypatch.setenv("TASKSTATE_TOKEN_FILE", str(token_file(tmp_path, TOKEN_OPS)))
    with ts(side.target, ns_b) as s:  # operators may write B
        s["private"] = "b's state"
    before_b = snapshot(redis_server, ns_b)

    monkeypatch.setenv("TASKSTATE_TOKEN_FILE", str(token_file(tmp_path, TOKEN_A)))
    _cache.sessions.clear()
    with ts(side.target, ns_a) as s:
        s["mine"] = 1
    with pytest.raises(PermissionDeniedError) as info:
        ts(side.target, ns_b, 1).__enter__()
    msg = str(info.value)
    assert repr(ns_b) in msg and "'job-a'" in msg and TOKEN_A not in msg
    assert snapshot(redis_server, ns_b) == before_b

    # no token, a wrong token
    monkeypatch.delenv("TASKSTATE_TOKEN_FILE")
    with pytest.raises(UnauthenticatedError, match="carried none"):
        ts(side.target, ns_a, 2).__enter__()
    monkeypatch.setenv("TASKSTATE_TOKEN", "x" * 32)
    with pytest.raises(UnauthenticatedError, match="not one this sidecar knows"):
        ts(side.target, ns_a, 2).__enter__()
    assert snapshot(redis_server, ns_b) == before_b
    log = side.log_path.read_text()
    assert TOKEN_A not in log and TOKEN_OPS not in log and "x" * 32 not in log


def cli(side: SidecarProcess, token: Path, *args: str, check: int, stdin: str = "") -> Any:
    r = subprocess.run(
        [sys.executable, "-m", "taskstate.cli.main", *args, "--sidecar", side.target,
         "--token-file", str(token)],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == check, (r.stdout, r.stderr)
    return r


def test_operator_commands_honour_tokens(
    guarded: tuple[SidecarProcess, str, str],
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    side, ns_a, ns_b = guarded
    ops, job_a = token_file(tmp_path, TOKEN_OPS), token_file(tmp_path, TOKEN_A)
    monkeypatch.setenv("TASKSTATE_TOKEN_FILE", str(ops))
    for ns in (ns_a, ns_b):
        with ts(side.target, ns) as s:
            s["k"] = ns
    before_b = snapshot(redis_server, ns_b)

    seen = json.loads(cli(side, job_a, "ls", "--json", check=0).stdout)
    assert ns_a in seen and ns_b not in seen  # listing shows only granted namespaces
    assert {ns_a, ns_b} <= set(json.loads(cli(side, ops, "ls", "--json", check=0).stdout))
    for args in (("ls", ns_b), ("show", f"{ns_b}/c/0"), ("export", ns_b),
                 ("drop", ns_b, "--yes"), ("adopt", ns_b)):  # fmt: skip
        r = cli(side, job_a, *args, check=1)
        assert f"namespace {ns_b!r}" in r.stderr and "job-a" in r.stderr, args
    dump = tmp_path / "b.jsonl"
    cli(side, ops, "export", ns_b, "--out", str(dump), check=0)
    # a file is refused at its check, before anything is written, like the commands above
    r = cli(side, job_a, "import", str(dump), "--replace", check=1)
    assert f"namespace {ns_b!r}" in r.stderr and "job-a" in r.stderr, r.stderr
    assert "cannot be imported whole" not in r.stderr  # the check's Describe was refused
    assert "may not import into it" not in r.stderr  # before any Import was sent
    # and the import itself refuses too (standard input is not checked before)
    r = cli(side, job_a, "import", "-", "--replace", check=1, stdin=dump.read_text())
    assert "may not import into it" in r.stderr
    assert snapshot(redis_server, ns_b) == before_b
    # any valid token may run doctor (it fails here only because the fixture's Redis
    # keeps nothing on disk)
    assert "[ok] redis reachable" in cli(side, job_a, "doctor", check=1).stdout


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "not JSON"),
        ('{"tokens": [{"name": "x", "token": "short", "namespaces": ["a"]}]}', "at least 16"),
        ('{"tokens": [{"name": "x", "token": "' + "t" * 20 + '", "namespaces": ["bad ns"]}]}',
         "namespace"),
        ('{"tokens": []}', "expected"),
    ],
)  # fmt: skip
def test_bad_tokens_file_stops_the_sidecar(
    redis_server: RedisServer, tmp_path: Path, content: str, says: str
) -> None:
    f = tmp_path / "tokens.json"
    f.write_text(content)
    r = start_sidecar(redis_server, tmp_path, "--tokens-file", str(f))
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert "t" * 20 not in r.stderr  # a token is never echoed back
