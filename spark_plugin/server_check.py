"""What a Spark Connect server lacks for taskstate, found by one task and named.

`configure(spark, ...)` on a Connect session runs one task on the server
(`connect._task_probe`), which calls `task_report` there: does the server's Python import
taskstate and its dependencies, which namespace and sidecar a TaskState would resolve,
and does that sidecar answer. The client turns the report into `problems`, each naming
what is missing and what to do.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .package import PLUGIN_CLASS

__all__ = ["PLUGIN_CLASS", "problems", "task_report"]

CHECK_COMPONENT = "configure-check"
HEALTH_TIMEOUT_S = 5.0


def task_report() -> dict[str, Any]:
    """In a task on the server: what TaskState would find here (JSON values only)."""
    from pyspark import TaskContext

    from taskstate.client import ConfigError, TaskStateConfig, TaskStateError
    from taskstate.client.address import plugin_sidecar
    from taskstate.client.admin import AdminClient

    ctx = TaskContext.get()
    report: dict[str, Any] = {"python": sys.executable}
    if ctx is None:
        report["config"] = "the check ran outside a Spark task"
        return report
    try:
        cfg = TaskStateConfig.resolve(
            component=CHECK_COMPONENT, local_property=lambda key: ctx.getLocalProperty(key)
        )
    except ConfigError as exc:
        report["config"] = str(exc)
        return report
    report["namespace"] = cfg.namespace
    report["sidecar"] = cfg.sidecar
    report["plugin_sidecar"] = plugin_sidecar(os.environ)
    try:
        with AdminClient(cfg.sidecar, timeout_s=HEALTH_TIMEOUT_S, security=cfg.security) as a:
            report["health"] = a.health()
    except TaskStateError as exc:
        report["health_error"] = str(exc)
    return report


def problems(
    report: dict[str, Any], *, namespace: str, sidecar: str | None, plugin: bool
) -> list[str]:
    """What the report says is missing, each with the operator's next step.

    `plugin`: whether the session's `spark.plugins` names the executor plugin.
    """
    if "import" in report:
        return [
            "the server's Python workers cannot import taskstate "
            f"({report['import']}). Install taskstate in the Python the server's executors "
            "run (pip install 'taskstate' there, or the packed environment of `taskstate "
            "spark-package --pack-env`); for task code alone, "
            "spark.addArtifacts('taskstate-pyfiles.zip', pyfile=True) also works, but a "
            "foreachBatch function runs in a server process that artifacts do not reach"
        ]
    if "config" in report:
        return [f"a task on the server cannot resolve its settings: {report['config']}"]
    found = []
    if report.get("namespace") != namespace:
        found.append(
            f"the server's tasks resolve namespace {report.get('namespace')!r}, not "
            f"{namespace!r}: TASKSTATE_NAMESPACE in the executors' environment overrides "
            "configure(); remove it from the server"
        )
    if "health_error" in report:
        if sidecar is None and not report.get("plugin_sidecar") and not plugin:
            found.append(
                "no sidecar for the server's tasks: the executor plugin is not loaded on "
                f"the Connect server (spark.plugins={PLUGIN_CLASS} with --jars "
                "taskstate-plugin.jar and spark.taskstate.redisUrl on its start command) "
                "and configure() got no sidecar=...; tasks would try "
                f"{report.get('sidecar')} ({report['health_error']})"
            )
        else:
            found.append(
                f"the sidecar {report.get('sidecar')} does not answer a task on the server: "
                f"{report['health_error']}"
            )
    elif report.get("health") not in (None, "SERVING"):
        found.append(
            f"the sidecar {report.get('sidecar')} answers {report.get('health')}: it cannot "
            "reach its Redis"
        )
    return found
