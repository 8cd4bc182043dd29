"""Redis URL forms, secrets kept out of logs, and which Redis errors are retried."""
# ruff: noqa: S105, S106 - test passwords

from __future__ import annotations

from pathlib import Path

import pytest
import redis.exceptions as rex

from taskstate.sidecar.retry import (
    is_permanent_connection_error,
    is_refusal,
    is_safe_to_retry,
    permanent_cause,
)
from taskstate.sidecar.storage.redis.connect import (
    RedisSettings,
    RedisUrlError,
    TlsFiles,
    create_client,
    parse,
    redact,
)


@pytest.mark.parametrize(
    ("url", "kind", "tls", "hosts", "master", "db"),
    [
        ("redis://h:6379/2", "standalone", False, (("h", 6379),), None, 2),
        ("redis://h/0", "standalone", False, (("h", 6379),), None, 0),  # the default port
        ("redis://[::1]", "standalone", False, (("::1", 6379),), None, 0),
        ("redis+sentinel://s1,s2:26380/m", "sentinel", False, (("s1", 26379), ("s2", 26380)),
         "m", 0),
        ("redis+cluster://a,b:7001", "cluster", False, (("a", 6379), ("b", 7001)), None, 0),
        ("redis://u:p@h:6379", "standalone", False, (("h", 6379),), None, 0),
        ("rediss://h:6380/0", "standalone", True, (("h", 6380),), None, 0),
        ("unix:///run/redis.sock?db=5", "standalone", False, (), None, 5),
        (
            "redis+sentinel://s1:26379,s2:26379/mymaster/3",
            "sentinel", False, (("s1", 26379), ("s2", 26379)), "mymaster", 3,
        ),
        ("rediss+sentinel://u:p@s1:26379/m", "sentinel", True, (("s1", 26379),), "m", 0),
        (
            "redis+cluster://a:7000,b:7001,[::1]:7002",
            "cluster", False, (("a", 7000), ("b", 7001), ("::1", 7002)), None, 0,
        ),
    ],
)  # fmt: skip
def test_url_forms(
    url: str, kind: str, tls: bool, hosts: tuple[tuple[str, int], ...], master: str | None, db: int
) -> None:
    p = parse(url)
    assert (p.kind, p.tls, p.hosts, p.master, p.db) == (kind, tls, hosts, master, db)


def test_credentials_from_url_are_decoded() -> None:
    p = parse("redis+cluster://tasks:p%40ss%3Aw@a:7000")
    assert (p.username, p.password) == ("tasks", "p@ss:w")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h:1", "unknown scheme"),
        ("redis://h:", "not HOST\\[:PORT\\]"),
        ("redis://", "not HOST\\[:PORT\\]"),
        ("redis://a:1,,b:2", "not HOST\\[:PORT\\]"),
        ("redis://a:1,b:2", "names one host"),
        ("redis://h:1/x", "not a number"),
        ("redis+sentinel://s:26379", "name the master"),
        ("redis+cluster://a:7000/1", "takes no path"),
        ("redis://h:70000", "out of range"),
        ("unix://relative.sock", "absolute"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, says: str) -> None:
    with pytest.raises(RedisUrlError, match=says):
        parse(url)


def test_refusals_never_show_the_password() -> None:
    with pytest.raises(RedisUrlError) as info:
        parse("redis://user:hunter2@h/zero")
    assert "hunter2" not in str(info.value) and "user:***@h" in str(info.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://u:secret@h:1/0", "redis://u:***@h:1/0"),
        ("redis://:secret@h:1", "redis://:***@h:1"),
        ("redis+cluster://u:se@cret@a:1,b:2", "redis+cluster://u:***@a:1,b:2"),
        ("redis://h:1/0?password=secret&db=1", "redis://h:1/0?password=***&db=1"),
        ("redis://h:1/0", "redis://h:1/0"),
        ("garbage", "<not a URL>"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_password_file_and_env_win_over_the_url(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_text("from-file\n")
    s = RedisSettings.build("redis://u:from-url@h:1", password_file=str(f), password_env="env")
    assert s.password == "from-file"
    assert RedisSettings.build("redis://u:from-url@h:1", password_env="env").password == "env"
    assert "from-file" not in repr(s) and "from-url" not in repr(s)


def test_empty_or_missing_secret_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(RedisUrlError, match="is empty"):
        RedisSettings.build("redis://h:1", password_file=str(tmp_path / "empty"))
    with pytest.raises(RedisUrlError, match="cannot read"):
        RedisSettings.build("redis://h:1", password_file=str(tmp_path / "missing"))


def test_clients_per_topology() -> None:
    from redis.asyncio.cluster import RedisCluster

    kind, c = create_client(RedisSettings(url="redis+cluster://a:7000"), socket_timeout_s=1)
    assert kind == "cluster" and isinstance(c, RedisCluster)
    kind, c = create_client(RedisSettings(url="redis+sentinel://s:1/m"), socket_timeout_s=1)
    assert kind == "sentinel" and c.connection_pool.service_name == "m"
    kind, c = create_client(
        RedisSettings(url="redis://u:url-pw@h:1/3", password="file-pw"), socket_timeout_s=1
    )
    kw = c.connection_pool.connection_kwargs
    assert kind == "standalone" and kw["password"] == "file-pw" and kw["db"] == 3


@pytest.mark.parametrize(
    "exc",
    [
        rex.ConnectionError("reset"),
        rex.TimeoutError(),
        rex.BusyLoadingError(),
        rex.TryAgainError(),
        rex.ClusterDownError("down"),
        rex.MasterDownError("down"),
        rex.ReadOnlyError(),
        rex.MovedError("3999 127.0.0.1:6381"),
        rex.ResponseError("LOADING Redis is loading the dataset in memory"),
        rex.ResponseError(
            "Script attempted to access a non local key in a cluster node script: ab12"
        ),
    ],
)
def test_retried(exc: Exception) -> None:
    assert is_safe_to_retry(exc)


@pytest.mark.parametrize(
    "exc",
    [
        rex.AuthenticationError("invalid username-password pair"),
        rex.NoPermissionError("NOPERM"),
        rex.ResponseError("TSFENCED 3"),
        rex.ResponseError("WRONGTYPE"),
        rex.ConnectionError("Error 1 connecting. [SSL: CERTIFICATE_VERIFY_FAILED]"),
        ValueError("bug"),
    ],
)
def test_not_retried(exc: Exception) -> None:
    assert not is_safe_to_retry(exc)


def test_permanent_errors_are_recognised() -> None:
    assert is_permanent_connection_error(rex.AuthenticationError("x"))
    assert not is_permanent_connection_error(rex.ConnectionError("refused"))
    # over a Unix socket redis-py raises a wrong password as a ConnectionError caused by
    # the AuthenticationError (redis/asyncio/connection.py: `raise ConnectionError(exc)
    # from exc`), its text without the WRONGPASS prefix
    wrapped = rex.ConnectionError("invalid username-password pair or user is disabled.")
    wrapped.__cause__ = rex.AuthenticationError("invalid username-password pair")
    assert is_permanent_connection_error(wrapped) and not is_safe_to_retry(wrapped)
    assert permanent_cause(wrapped) is wrapped.__cause__


def test_a_scripts_refusal_is_an_answer_not_a_redis_error() -> None:
    assert is_refusal(rex.ResponseError("TSNEW")) and is_refusal(rex.ResponseError("TSFENCED 3"))
    assert not is_refusal(rex.ResponseError("WRONGTYPE Operation against a key"))
    assert not is_refusal(rex.ConnectionError("TS"))


def test_tls_reaches_every_topology(tmp_path: Path) -> None:
    from redis.asyncio.connection import SSLConnection
    from redis.asyncio.sentinel import SentinelManagedSSLConnection

    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    settings = RedisSettings.build("rediss+sentinel://s:1/m", tls=TlsFiles(ca=str(ca)))
    _, c = create_client(settings, socket_timeout_s=1)
    pool = c.connection_pool
    assert issubclass(pool.connection_class, SentinelManagedSSLConnection)
    assert pool.connection_kwargs["ssl_ca_certs"] == str(ca)
    sentinel_kw = pool.sentinel_manager.sentinel_kwargs
    assert sentinel_kw["ssl"] is True and sentinel_kw["ssl_ca_certs"] == str(ca)

    _, c = create_client(settings.with_url("rediss+cluster://a:7000"), socket_timeout_s=1)
    node_kw = c.nodes_manager.connection_kwargs
    assert node_kw["ssl_ca_certs"] == str(ca)
    assert issubclass(node_kw["connection_class"], SSLConnection)

    _, c = create_client(settings.with_url("rediss://h:6380/0"), socket_timeout_s=1)
    assert issubclass(c.connection_pool.connection_class, SSLConnection)


def test_missing_tls_files_are_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(RedisUrlError, match="TLS CA file"):
        RedisSettings.build("rediss://h:1", tls=TlsFiles(ca=str(tmp_path / "nope")))


def test_a_retried_call_warns_once_and_counts_every_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio
    import logging

    from taskstate.sidecar import metrics
    from taskstate.sidecar.retry import RetryPolicy

    failures = [rex.ConnectionError("reset")] * 3

    async def call() -> str:
        if failures:
            raise failures.pop()
        return "ok"

    retries = metrics.REDIS_RETRIES.labels("unit-op")
    before = retries._value.get()
    with caplog.at_level(logging.DEBUG, logger="taskstate.sidecar.retry"):
        policy = RetryPolicy(deadline_s=10, initial_s=0.001, max_sleep_s=0.001)
        assert asyncio.run(policy.run("unit-op", call)) == "ok"
    records = [r for r in caplog.records if r.getMessage() == "redis call failed, retrying"]
    assert [(r.levelname, getattr(r, "attempt", None)) for r in records] == [
        ("WARNING", 1), ("DEBUG", 2), ("DEBUG", 3)
    ]  # fmt: skip
    assert retries._value.get() - before == 3
