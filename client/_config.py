"""TaskState settings, resolved once: argument > environment > Spark local property > default.

The Spark local properties are those `taskstate.spark_plugin.configure` sets: `taskstate.X`
on a classic session, the SQL conf `spark.taskstate.X` on a Spark Connect session (Spark
hands SQL confs to tasks as local properties); the first wins where both are present.

Once per task attempt and process (`for_attempt`): the first block of an attempt resolves
its settings, and the attempt's later blocks (one per group in applyInPandasWithState)
reuse them: a task's local properties and its worker's environment do not change during
the attempt, and resolving them was most of the cost of building a TaskState at every
group call. (`_parts.py` keeps, per attempt, what TaskState builds from them as well.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from taskstate.proto import ids
from taskstate.proto.durability import Durability
from taskstate.proto.properties import (
    NAMESPACE_CONF,
    NAMESPACE_PROPERTY,
)

from ._errors import ConfigError
from ._security import SidecarSecurity
from ._settings import (
    CACHE_BYTES,
    CACHE_TASKS,
    LOAD,
    MAX_MESSAGE_BYTES,
    NAMESPACE,
    RETRY_DEADLINE,
    TIMEOUT,
    Setting,
)
from .address import grpc_target, task_sidecar

LOADS = ("on-demand", "eager")
MODES = ("mirror", "remote")
CODECS = ("json",)


# The public name of a durability level (taskstate.proto.durability: its one spelling).
DurabilitySpec = Durability


def _float_env(env: Mapping[str, str], setting: Setting[float]) -> float:
    name, raw = setting.env, env.get(setting.env)
    if raw is None or raw == "":
        return setting.default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


def _int_env(env: Mapping[str, str], setting: Setting[int], *, minimum: int) -> int:
    name, raw = setting.env, env.get(setting.env)
    if raw is None or raw == "":
        return setting.default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


@dataclass(frozen=True, slots=True)
class TaskStateConfig:
    """Everything a TaskState needs, validated. Build it with `resolve`."""

    namespace: str
    component: str
    sidecar: str
    mode: str = "mirror"
    durability: Durability = Durability()
    codec: str = "json"
    timeout_s: float = TIMEOUT.default
    retry_deadline_s: float = RETRY_DEADLINE.default
    max_message_bytes: int = MAX_MESSAGE_BYTES.default
    cache_tasks: int = CACHE_TASKS.default
    cache_bytes: int = CACHE_BYTES.default
    load: str = LOAD.default
    security: SidecarSecurity = SidecarSecurity()
    partitions: int | None = None  # how many partitions the component is split into

    @property
    def target(self) -> str:
        """The gRPC target of the sidecar."""
        return grpc_target(self.sidecar)

    @classmethod
    def resolve(
        cls,
        *,
        component: str,
        namespace: str | None = None,
        sidecar: str | None = None,
        mode: str = "mirror",
        durability: str = "applied",
        codec: str = "json",
        local_property: Callable[[str], str | None] = lambda _: None,
        env: Mapping[str, str] | None = None,
        partitions: int | None = None,
    ) -> TaskStateConfig:
        """Apply the precedence argument > environment > Spark local property > default.

        For the sidecar, between the local property and the default comes the sidecar
        that the executor plugin started for this worker's executor.
        """
        env = os.environ if env is None else env
        ns = (
            namespace
            or env.get(NAMESPACE.env)
            or local_property(NAMESPACE_PROPERTY)
            or local_property(NAMESPACE_CONF)
        )
        if not ns:
            raise ConfigError(
                f"no namespace for component {component!r}: pass namespace=... or set "
                f"{NAMESPACE.env} (the job's stable name across restarts, never the Spark "
                "application id), or call taskstate.spark_plugin.configure(spark, namespace=...)"
            )
        for kind, value in (("namespace", ns), ("component", component)):
            problem = ids.name_problem(kind, value)
            if problem:
                raise ConfigError(f"{problem} (task {ns}/{component})")
        if mode not in MODES:
            raise ConfigError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if codec not in CODECS:
            raise ConfigError(f"codec {codec!r} is not one of {', '.join(CODECS)}")
        target = task_sidecar(sidecar, env, local_property)
        max_message = _int_env(env, MAX_MESSAGE_BYTES, minimum=1 << 16)
        cache_tasks = _int_env(env, CACHE_TASKS, minimum=0)
        cache_bytes = _int_env(env, CACHE_BYTES, minimum=0)
        load = env.get(LOAD.env) or LOAD.default
        if load not in LOADS:
            raise ConfigError(
                f"{LOAD.env}={load!r} is not one of {', '.join(LOADS)} (task {ns}/{component})"
            )
        return cls(
            namespace=ns,
            component=component,
            sidecar=target,
            mode=mode,
            durability=_durability(durability, f"{ns}/{component}"),
            codec=codec,
            timeout_s=_float_env(env, TIMEOUT),
            retry_deadline_s=_float_env(env, RETRY_DEADLINE),
            max_message_bytes=max_message,
            cache_tasks=cache_tasks,
            cache_bytes=cache_bytes,
            load=load,
            security=SidecarSecurity.from_env(env),
            partitions=_partitions(partitions, f"{ns}/{component}"),
        )


ATTEMPTS_KEPT = 256
T = TypeVar("T")


def typed(arguments: Mapping[str, Any]) -> tuple[tuple[str, type, Any], ...]:
    """Arguments as part of a table key, each value with its type.

    1, 1.0 and True are equal keys, not equal arguments (True is no partition count).
    """
    return tuple((n, v.__class__, v) for n, v in arguments.items())


def kept_per_attempt(
    table: dict[tuple[object, ...], T],
    key: tuple[object, ...],
    build: Callable[..., T],
    *args: Any,
) -> T:
    """`build(*args)`, kept in `table` under `key` (which names the task attempt).

    The attempts of a process come and go, so the table is emptied when it grows past
    ATTEMPTS_KEPT (an evicted attempt builds again, that is all). A key that cannot be
    hashed is not kept: `build` says what is wrong with the argument in it. (`args`, not
    a closure: a block's TaskState goes through here at every group call.)
    """
    try:
        found = table.get(key)
    except TypeError:
        return build(*args)
    if found is None:
        found = build(*args)
        if len(table) >= ATTEMPTS_KEPT:
            table.clear()
        table[key] = found
    return found


_by_attempt: dict[tuple[object, ...], TaskStateConfig] = {}  # (attempt, arguments) -> settings


def for_attempt(
    attempt_id: str, local_property: Callable[[str], str | None], **arguments: Any
) -> TaskStateConfig:
    """`TaskStateConfig.resolve(**arguments)`, once per task attempt and arguments here."""
    return kept_per_attempt(
        _by_attempt,
        (attempt_id, *typed(arguments)),
        lambda: TaskStateConfig.resolve(local_property=local_property, **arguments),
    )


def _durability(text: str, where: str) -> Durability:
    try:
        return Durability.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{exc} (task {where})") from None


def _partitions(value: int | None, where: str) -> int | None:
    """TaskState(partitions=...): a positive count, or None (not declared)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"task {where}: partitions={value!r}: pass how many partitions the job splits "
            "this component into: N as in repartition(N, key), or for a stateful operator the "
            "count its checkpoint runs with (docs/concepts/identity.md)"
        )
    return value


OPEN_AT = ("enter", "exit")


def open_at_exit(open_at: str, component: str) -> bool:
    """TaskState(open_at=...): whether a block may leave its Open to its exit."""
    if open_at not in OPEN_AT:
        raise ConfigError(
            f"component {component!r}: open_at={open_at!r} is not one of "
            f"{', '.join(map(repr, OPEN_AT))}. Nothing was opened."
        )
    return open_at == "exit"
