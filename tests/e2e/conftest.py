"""Real PySpark, a real redis-server and the real sidecar process."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from taskstate.sidecar.storage.redis.keys import data_key
from taskstate.testing import RedisServer, SidecarProcess, find_redis_server

pytestmark = pytest.mark.e2e


def _require(what: str, hint: str) -> None:
    pytest.fail(f"{what} is missing: {hint}", pytrace=False)


@pytest.fixture(scope="session")
def spark_ready() -> None:
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        _require(str(exc.name), "pip install 'taskstate[spark]' (pyspark, pandas, pyarrow)")
    if shutil.which("java") is None:
        _require("java", "install a Java 17 runtime (Debian: apt-get install openjdk-17-jre)")


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    try:
        find_redis_server()
    except FileNotFoundError as exc:
        _require("redis-server", str(exc))
    with RedisServer(tmp_path_factory.mktemp("redis")) as r:
        yield r


@pytest.fixture(scope="module")
def sidecar(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SidecarProcess]:
    with SidecarProcess(redis_server.url, tmp_path_factory.mktemp("sc") / "s.sock") as s:
        yield s


@pytest.fixture(scope="session")
def plugin_jar(spark_ready: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The executor plugin, built with javac against pyspark's jars."""
    from taskstate.spark_plugin.package import build_jar

    return str(build_jar(tmp_path_factory.mktemp("jar")))


def stored_state(redis: RedisServer, namespace: str, component: str) -> dict[str, Any]:
    """Every partition's committed state of a component, read straight from Redis."""
    c = redis.client()
    out: dict[str, Any] = {}
    for key in c.scan_iter(match=data_key(namespace, component, "*")):
        out.update({k.decode(): orjson.loads(v) for k, v in c.hgetall(key).items()})
    return out
