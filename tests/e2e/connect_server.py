"""A Spark Connect server for the e2e tests: `spark-submit --class SparkConnectServer`.

Started as an operator starts one (`sbin/start-connect-server.sh` runs the same class),
in a process group of its own, on a port it picks (`spark.connect.grpc.binding.port=0`;
the port is read from its log line "Spark Connect server started at: ...:PORT").
Connect clients run in child processes of the tests: a client in the pytest process
would switch pyspark into Connect mode for the classic sessions of other modules.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

STARTED = re.compile(r"Spark Connect server started at: .*:(\d+)\s*$", re.MULTILINE)


class ConnectServer:
    """One Connect server process; `url` once started."""

    def __init__(
        self,
        workdir: Path,
        *,
        conf: Mapping[str, str] = {},
        jars: Sequence[str] = (),
        env: Mapping[str, str] = {},
        python: str = sys.executable,
    ) -> None:
        self.workdir = workdir
        self.log = workdir / "connect-server.log"
        self.conf = {
            "spark.connect.grpc.binding.port": "0",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.stateStore.providerClass": (
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
            ),
            "spark.speculation": "false",
            **conf,
        }
        self.jars = list(jars)
        self.env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": python,  # the executors' Python workers
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, master: str = "local[2,4]", timeout: float = 180) -> ConnectServer:
        """Start the server; return once it listens."""
        import pyspark

        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        cmd = [str(submit), "--master", master, "--name", "taskstate-e2e-connect"]
        if self.jars:
            cmd += ["--jars", ",".join(self.jars)]
        for key, value in self.conf.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
        cmd += ["spark-internal"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.workdir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = STARTED.search(self.log.read_text(errors="replace"))
            if found:
                self.url = f"sc://127.0.0.1:{found.group(1)}"
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.25)
        tail = self.log.read_text(errors="replace")[-3000:]
        self.stop()
        pytest.fail(f"the Spark Connect server did not start; its log ends with:\n{tail}")

    def stop(self) -> None:
        """SIGTERM (the JVM stops its Python workers), then SIGKILL of the whole group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None
