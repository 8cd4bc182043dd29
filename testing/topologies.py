"""Real Redis topologies for tests: TCP nodes, a Cluster, a Sentinel set, TLS material.

Everything is built from the `redis-server` binary alone (no redis-cli, no Docker):
a cluster is assembled with CLUSTER ADDSLOTSRANGE / MEET / REPLICATE, a sentinel is
`redis-server sentinel.conf --sentinel`. Every process runs in its own session so a
test can SIGKILL it, and `restart()` brings a node back with its data directory.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .processes import _wait_until, find_redis_server

_used_ports: set[int] = set()


def free_port(*, with_bus: bool = False) -> int:
    """A free TCP port on 127.0.0.1 (and port + 10000 free too, for a cluster bus)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port in _used_ports or (with_bus and port + 10000 > 65535):
            continue
        if with_bus:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        _used_ports.add(port)
        return port
    raise RuntimeError("no free TCP port pair found")


@dataclass(frozen=True)
class TlsMaterial:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_tls_material(directory: Path) -> TlsMaterial:
    """Create the CA and certificates with the `openssl` command line tool."""
    if shutil.which("openssl") is None:
        raise FileNotFoundError(
            "openssl was not found; the TLS tests need it to make a test CA "
            "(Debian/Ubuntu: sudo apt-get install openssl; bin/setup does this)"
        )
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)  # noqa: S603, S607

    ssl("genrsa", "-out", "ca.key", "2048")
    ssl("req", "-x509", "-new", "-key", "ca.key", "-days", "2", "-subj", "/CN=taskstate-test-ca",
        "-out", "ca.crt")  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        ssl("genrsa", "-out", f"{name}.key", "2048")
        ssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN=taskstate-{name}",
            "-out", f"{name}.csr")  # fmt: skip
        ssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext",
            "-out", f"{name}.crt")  # fmt: skip
    return TlsMaterial(
        d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key"
    )


class RedisNode:
    """A redis-server on 127.0.0.1:PORT (plain or TLS), restartable with its data."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        args: Sequence[str] = (),
        tls: TlsMaterial | None = None,
        cluster: bool = False,
        password: str | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port(with_bus=cluster)
        self.args = list(args)
        self.tls = tls
        self.cluster = cluster
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`."""
        return f"127.0.0.1:{self.port}"

    def command_line(self) -> list[str]:
        """The redis-server arguments."""
        cmd = [
            find_redis_server(),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--save",
            "",
            "--logfile",
            str(self.workdir / "redis.log"),
            "--enable-debug-command",
            "local",
        ]
        if self.tls is None:
            cmd += ["--port", str(self.port)]
        else:
            cmd += [
                "--port", "0", "--tls-port", str(self.port),
                "--tls-cert-file", str(self.tls.server_cert),
                "--tls-key-file", str(self.tls.server_key),
                "--tls-ca-cert-file", str(self.tls.ca),
                "--tls-auth-clients", "optional",
            ]  # fmt: skip
        if self.cluster:
            cmd += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.workdir / "nodes.conf"),
                "--cluster-node-timeout", "2000",
                "--cluster-replica-validity-factor", "0",
                "--cluster-require-full-coverage", "no",
            ]  # fmt: skip
        return cmd + self.args

    def start(self, timeout: float = 20.0) -> RedisNode:
        """Start (or restart, keeping the data directory) and wait for PING.

        A node already running is an error (`kill()` it first): a second process would
        leave the first running, out of the test's reach.
        """
        if self.alive:
            raise RuntimeError(
                f"redis-server on {self.address} is already running; kill() it first"
            )
        self.proc = subprocess.Popen(  # noqa: S603 - our own binary and arguments
            self.command_line(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_until(self.ping, timeout, f"redis-server on {self.address}")
        return self

    restart = start

    def client(self, **kw: Any) -> Any:
        """A synchronous redis-py client to this node only."""
        import redis

        extra: dict[str, Any] = {}
        if self.tls is not None:
            extra = {
                "ssl": True,
                "ssl_ca_certs": str(self.tls.ca),
                "ssl_certfile": str(self.tls.client_cert),
                "ssl_keyfile": str(self.tls.client_key),
            }
        if self.password:
            extra["password"] = self.password
        return redis.Redis(host="127.0.0.1", port=self.port, **extra, **kw)

    def ping(self) -> bool:
        """True when the server answers PING (and is not loading)."""
        if self.proc is not None and self.proc.poll() is not None:
            log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {log}")
        c = self.client(socket_timeout=1)
        try:
            return bool(c.ping())
        finally:
            c.close()

    def kill(self, sig: int = 9) -> None:
        """Send `sig` (SIGKILL by default) and wait for the process to end."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def info(self, section: str) -> dict[str, Any]:
        """INFO section as a dict."""
        c = self.client(socket_timeout=2)
        try:
            return dict(c.info(section))
        finally:
            c.close()


class RedisClusterProcs:
    """A Redis Cluster of `masters` primaries with `replicas` replicas each, on 127.0.0.1."""

    def __init__(self, workdir: Path | None = None, *, masters: int = 3, replicas: int = 1) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="taskstate-cluster-"))
        self.nodes = [
            RedisNode(self.workdir / f"node{i}", cluster=True)
            for i in range(masters * (1 + replicas))
        ]
        self.masters = masters
        self.replicas = replicas

    @property
    def url(self) -> str:
        """`redis+cluster://…` naming every node."""
        return "redis+cluster://" + ",".join(n.address for n in self.nodes)

    def start(self, timeout: float = 60.0) -> RedisClusterProcs:
        """Start the nodes, assign slots, join them, attach replicas; wait until ok."""
        for n in self.nodes:
            n.start()
        primaries = self.nodes[: self.masters]
        per = 16384 // self.masters
        for i, node in enumerate(primaries):
            end = 16383 if i == self.masters - 1 else (i + 1) * per - 1
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, end)
        first = self.nodes[0]
        for n in self.nodes[1:]:
            n.client().execute_command("CLUSTER", "MEET", "127.0.0.1", first.port)
        _wait_until(
            lambda: all(len(self._nodes_view(n)) == len(self.nodes) for n in self.nodes),
            timeout,
            "cluster nodes meeting each other",
        )
        for i, replica in enumerate(self.nodes[self.masters :]):
            master = primaries[i % self.masters]
            _wait_until(
                lambda r=replica, m=master: bool(
                    r.client().execute_command("CLUSTER", "REPLICATE", self.node_id(m))
                ),
                timeout,
                f"replica {replica.address} attaching",
            )
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until every live node says cluster_state:ok and every replica link is up."""

        def ok() -> bool:
            for n in self.nodes:
                if not n.alive:
                    continue
                info = n.client().execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
                repl = n.info("replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    return False
            return True

        _wait_until(ok, timeout, "the cluster becoming healthy")

    @staticmethod
    def _nodes_view(node: RedisNode) -> list[list[str]]:
        raw = node.client().execute_command("CLUSTER", "NODES")
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return [line.split() for line in text.strip().splitlines() if line.strip()]

    def node_id(self, node: RedisNode) -> str:
        """The node's cluster id."""
        raw = node.client().execute_command("CLUSTER", "MYID")
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def by_address(self, address: str) -> RedisNode:
        """The node listening on `127.0.0.1:PORT`."""
        for n in self.nodes:
            if n.address == address:
                return n
        raise KeyError(address)

    def owner(self, slot: int) -> RedisNode:
        """The live primary serving `slot`, asked of any live node."""
        for n in self.nodes:
            if not n.alive:
                continue
            for start, end, master, *_ in n.client().execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    host = master[0].decode() if isinstance(master[0], bytes) else master[0]
                    return self.by_address(f"{host}:{master[1]}")
        raise KeyError(slot)

    def replica_of(self, master: RedisNode) -> RedisNode:
        """A live replica of `master`."""
        mid = self.node_id(master)
        for n in self.nodes:
            if n.alive and n is not master:
                repl = n.info("replication")
                if repl.get("role") == "slave" and int(repl.get("master_port", 0)) == master.port:
                    return n
        raise KeyError(f"no live replica of {master.address} ({mid})")

    def client(self) -> Any:
        """A synchronous redis-py RedisCluster client."""
        from redis.cluster import ClusterNode, RedisCluster

        live = [ClusterNode("127.0.0.1", n.port) for n in self.nodes if n.alive]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=live, require_full_coverage=False)

    def migrate_slot(self, slot: int, dst: RedisNode, *, per_key_delay_s: float = 0.0) -> int:
        """Move `slot` to `dst` key by key (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE).

        Returns how many keys moved. With a delay, commits that run meanwhile meet ASK
        and TRYAGAIN replies.
        """
        src = self.owner(slot)
        if src is dst:
            return 0
        src_id, dst_id = self.node_id(src), self.node_id(dst)
        dst.client().execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.client().execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        moved = 0
        sc = src.client()
        while True:
            keys = sc.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)
            if not keys:
                break
            for key in keys:
                sc.execute_command("MIGRATE", "127.0.0.1", dst.port, key, 0, 5000)
                moved += 1
                if per_key_delay_s:
                    time.sleep(per_key_delay_s)
        for n in (dst, src, *[m for m in self.nodes if m.alive and m not in (src, dst)]):
            with contextlib.suppress(Exception):  # replicas refuse SETSLOT; they learn it
                n.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return moved

    def stop(self) -> None:
        """SIGKILL every node."""
        for n in self.nodes:
            n.kill()

    def __enter__(self) -> RedisClusterProcs:
        """Start it, unless `start()` already did."""
        return self if any(n.alive for n in self.nodes) else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisSentinelProcs:
    """A master, one replica and `sentinels` sentinels watching them (quorum: a majority).

    One sentinel (quorum 1) by default; three is what a production deployment runs.
    """

    def __init__(
        self, workdir: Path | None = None, *, master_name: str = "tsmaster", sentinels: int = 1
    ) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="taskstate-sentinel-"))
        self.master_name = master_name
        self.master = RedisNode(self.workdir / "master")
        self.replica = RedisNode(
            self.workdir / "replica", args=["--replicaof", "127.0.0.1", str(self.master.port)]
        )
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.sentinel_port = self.sentinel_ports[0]
        self.sentinel_procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """`redis+sentinel://127.0.0.1:PORT[,127.0.0.1:PORT...]/MASTER`."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.master_name}"

    def start(self, timeout: float = 30.0) -> RedisSentinelProcs:
        """Start master, replica and sentinel; wait until the replica is in sync."""
        self.master.start()
        self.replica.start()
        _wait_until(
            lambda: self.replica.info("replication").get("master_link_status") == "up",
            timeout,
            "the replica syncing",
        )
        quorum = len(self.sentinel_ports) // 2 + 1
        for i, port in enumerate(self.sentinel_ports):
            d = self.workdir / ("sentinel" if i == 0 else f"sentinel{i}")
            d.mkdir(parents=True, exist_ok=True)
            conf = d / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {d}\n"
                f"logfile {d / 'sentinel.log'}\n"
                f"sentinel monitor {self.master_name} 127.0.0.1 {self.master.port} {quorum}\n"
                f"sentinel down-after-milliseconds {self.master_name} 2000\n"
                f"sentinel failover-timeout {self.master_name} 10000\n"
                f"sentinel parallel-syncs {self.master_name} 1\n"
            )
            self.sentinel_procs.append(
                subprocess.Popen(  # noqa: S603
                    [find_redis_server(), str(conf), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        _wait_until(lambda: self.current_master() is not None, timeout, "the sentinel")
        _wait_until(
            lambda: int(self._sentinel().sentinel_master(self.master_name)["num-slaves"]) >= 1,
            timeout,
            "the sentinel discovering the replica",
        )
        others = len(self.sentinel_ports) - 1
        _wait_until(  # a failover needs a majority of sentinels that know of each other
            lambda: (
                int(self._sentinel().sentinel_master(self.master_name)["num-other-sentinels"])
                >= others
            ),
            timeout,
            "the sentinels discovering each other",
        )
        return self

    def _sentinel(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.sentinel_port, socket_timeout=2)

    def current_master(self) -> RedisNode | None:
        """The node the sentinel names master now."""
        host, port = self._sentinel().sentinel_get_master_addr_by_name(self.master_name)
        for n in (self.master, self.replica):
            if n.port == int(port):
                return n
        return None

    def nodes(self) -> Iterator[RedisNode]:
        """Master and replica (in their original roles)."""
        yield self.master
        yield self.replica

    def stop(self) -> None:
        """SIGKILL everything."""
        for proc in self.sentinel_procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        for n in self.nodes():
            n.kill()

    def __enter__(self) -> RedisSentinelProcs:
        """Start it, unless `start()` already did."""
        return self if any(n.alive for n in self.nodes()) else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
