"""How a commit reaches the durability it asked for: WAIT, WAITAOF or a checked config.

`applied` sends nothing after the write; `replicated:N` sends WAIT N; `fsynced` sends
WAITAOF on Redis >= 7.2 and, on older servers, checks that every primary runs
`appendonly yes` with `appendfsync always` (the check is cached for a few seconds).
"""

from __future__ import annotations

import time
from typing import Any

import redis.exceptions as rex

from taskstate.proto import codes
from taskstate.proto.durability import Durability

from ...errors import SidecarError
from ..values import Check, ServerReport, TaskKey
from .replies import text
from .routing import Connection


class DurabilityWaits:
    """The waits and checks behind the durability levels, for one connection."""

    def __init__(self, conn: Connection, timeout_ms: int, fsync_check_ttl_s: float) -> None:
        self._conn = conn
        self.timeout_ms = timeout_ms
        self._fsync_ok_until = 0.0
        self._fsync_check_ttl_s = fsync_check_ttl_s

    async def wait_for(self, durability: Durability, task: TaskKey) -> tuple[int, ...]:
        """What to send after the write: () nothing, (0, n, ms) WAIT, (1, 1, n, ms) WAITAOF."""
        if durability.fsynced and await self.check_fsync(task) == "waitaof":
            return (1, 1, durability.replicas, self.timeout_ms)
        if durability.replicas:
            return (0, durability.replicas, self.timeout_ms)
        return ()

    async def check_fsync(self, task: TaskKey | None = None) -> str:
        """How `fsynced` is met: "waitaof" (Redis >= 7.2) or "config" (checked config).

        Redis < 7.2 has no WAITAOF; there a commit is fsynced before Redis replies only
        when the server runs `appendonly yes` with `appendfsync always`, so that is what
        is checked (again after `fsync_check_ttl_s`, as configs and masters change).
        """
        conn = self._conn
        version = await conn.server_version()
        if version >= (7, 2):
            return "waitaof"
        if time.monotonic() < self._fsync_ok_until:
            return "config"
        shown = ".".join(map(str, version))
        where = f"task {task.fq}: " if task is not None else ""
        try:
            configs = await conn.run("config", lambda: conn.each_server("CONFIG", "GET", "append*"))
        except rex.ResponseError as exc:
            raise SidecarError(
                codes.DURABILITY,
                f"{where}durability 'fsynced' on Redis {shown} (no WAITAOF) needs a check that "
                f"the server runs appendonly yes / appendfsync always, and CONFIG GET was "
                f"refused ({exc}). Operator action: allow the sidecar's Redis user "
                "+config|get, upgrade to Redis >= 7.2, or choose durability 'applied' or "
                "'replicated:N'.",
            ) from None
        for cfg in configs:
            named = {text(k): text(v) for k, v in cfg.items()}
            aof, fsync = named.get("appendonly", ""), named.get("appendfsync", "")
            if aof != "yes" or fsync != "always":
                raise SidecarError(
                    codes.DURABILITY,
                    f"{where}durability 'fsynced' on Redis {shown} (no WAITAOF) needs "
                    f"'appendonly yes' and 'appendfsync always', but the server runs "
                    f"appendonly={aof or '?'} appendfsync={fsync or '?'}. Operator action: "
                    "configure Redis so, upgrade to Redis >= 7.2 (WAITAOF), or choose "
                    "durability 'applied' or 'replicated:N'.",
                )
        self._fsync_ok_until = time.monotonic() + self._fsync_check_ttl_s
        return "config"

    def check_acks(
        self, task: TaskKey, durability: Durability, wait: tuple[int, ...], ack: Any
    ) -> int:
        """The replicas that acknowledged a wait's reply; DURABILITY error when short."""
        if wait[0] == 0:
            acked = int(ack)
            if acked < durability.replicas:
                raise self._short(task, durability, f"{acked} replica(s) acknowledged")
            return acked
        local, acked = int(ack[0]), int(ack[1])
        if local < wait[1] or acked < durability.replicas:
            raise self._short(
                task, durability, f"fsynced locally: {local}, replicas fsynced: {acked}"
            )
        return acked

    def _short(self, task: TaskKey, durability: Durability, got: str) -> SidecarError:
        return SidecarError(
            codes.DURABILITY,
            f"task {task.fq}: the commit was applied by Redis but did not reach durability "
            f"'{durability}' within {self.timeout_ms} ms ({got}). "
            "Treat the batch as failed: Spark retries it and the replay is rolled back first. "
            "Operator action: check the replicas / persistence of Redis.",
        )

    async def doctor_check(self, durability: Durability, servers: list[ServerReport]) -> Check:
        """Whether `durability` can hold on these servers (for `taskstate doctor`)."""
        name = f"durability {durability}"
        problems = []
        if durability.replicas:
            short = [s for s in servers if s.connected_replicas < durability.replicas]
            if short:
                seen = ", ".join(f"{s.address}: {s.connected_replicas}" for s in short)
                problems.append(
                    f"{len(short)} primary server(s) have fewer than {durability.replicas} "
                    f"connected replica(s) ({seen}); commits would fail with "
                    "DurabilityError. Add replicas or lower N."
                )
        if durability.fsynced:
            no_aof = [s for s in servers if not s.aof_enabled]
            if no_aof:
                problems.append(
                    f"{len(no_aof)} server(s) run without persistence (appendonly no): "
                    "'fsynced' is impossible there. Set 'appendonly yes' (and on Redis < 7.2 "
                    "'appendfsync always'), or choose durability 'applied'."
                )
            else:
                try:
                    await self.check_fsync()
                except SidecarError as exc:
                    problems.append(exc.message)
        if problems:
            return Check(name, False, " ".join(problems))
        return Check(name, True, "possible with this Redis")
