"""`taskstate doctor | health`: can it work here, and is the sidecar up."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO, Any

from taskstate.client import SidecarUnavailableError, TaskStateError
from taskstate.client.admin import AdminClient

from .common import dump, table
from .target import unreachable_hint


def cmd_doctor(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate doctor`: sidecar, Redis, persistence; exit 1 when a check fails."""
    checks: list[dict[str, Any]] = []
    report: dict[str, Any] = {"sidecar": admin.sidecar}
    try:
        serving = admin.health(min(admin.timeout_s, 5)) == "SERVING"
        checks.append(
            {"name": "sidecar reachable", "ok": True, "detail": f"answers at {admin.sidecar}"}
        )
        checks.append({"name": "sidecar serving", "ok": serving, "detail": "SERVING" if serving else
                       "NOT_SERVING: the sidecar cannot reach Redis; see its log"})  # fmt: skip
    except SidecarUnavailableError as exc:
        checks.append({"name": "sidecar reachable", "ok": False, "detail":
                       f"{exc}. Start one (taskstate sidecar --redis-url URL --listen "
                       f"{admin.sidecar}), or {unreachable_hint('doctor')}."})  # fmt: skip
    if checks[0]["ok"]:
        try:
            r = admin.doctor(a.durability)
            report.update({"redis_url": r.redis_url, "topology": r.topology, "servers": [
                {"address": s.address, "role": s.role, "version": s.version, "aof": s.aof_enabled,
                 "appendfsync": s.appendfsync, "replicas": s.connected_replicas}
                for s in r.servers]})  # fmt: skip
            checks.extend({"name": c.name, "ok": c.ok, "detail": c.detail} for c in r.checks)
        except TaskStateError as exc:
            checks.append({"name": "redis", "ok": False, "detail": str(exc)})
    report["checks"] = checks
    ok = all(c["ok"] for c in checks)
    report["ok"] = ok
    if a.json:
        dump(report, out)
    else:
        if "topology" in report:
            out.write(f"redis: {report['redis_url']} ({report['topology']})\n")
            rows: list[Sequence[Any]] = [
                ("SERVER", "ROLE", "VERSION", "AOF", "APPENDFSYNC", "REPLICAS")
            ]
            for s in report["servers"]:
                rows.append((s["address"], s["role"], s["version"], "yes" if s["aof"] else "no",
                             s["appendfsync"], s["replicas"]))  # fmt: skip
            table(rows, out)
            out.write("\n")
        for c in checks:
            out.write(f"[{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}\n")
    return 0 if ok else 1


def cmd_health(a: argparse.Namespace, admin: AdminClient, out: IO[str]) -> int:
    """`taskstate health`: the sidecar's gRPC health over its socket (Kubernetes probes).

    Exit 0 when it is SERVING (with --live: when it answers at all; a sidecar whose Redis
    is down is alive, only not ready), else 1.
    """
    try:
        status = admin.health()
    except SidecarUnavailableError as exc:
        print(f"taskstate health: {exc}: {unreachable_hint('health')}.", file=sys.stderr)
        return 1
    out.write(status + "\n")
    return 0 if a.live or status == "SERVING" else 1
