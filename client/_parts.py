"""What the blocks of one task attempt share: built by its first block in this process.

applyInPandasWithState runs a `with TaskState(...)` block per group: thousands per task
attempt, each with the same task and arguments. The settings, the task's names, the
schema, the transport and the objects that Open, read and commit through it are the same
for all of them and never change once built (frozen or slotted, nothing assigned after
`__init__`), so the attempt's first block builds them and its later blocks take them from
here. A block's own changes (`_block.Block`) are always new.

Kept per (process, task identity, arguments), as `_config` keeps the settings
(`kept_per_attempt`). A `TaskIdentity` holds the attempt, the partition and the batch, so
a reused `LocalContext` whose batch moved finds other parts. Arguments that cannot be
hashed, and `upgrade` functions, skip the table: the block builds its own, and a bad
argument is refused as it always was.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto.ids import fq_task_id

from ._claims import Claims, writer_of
from ._codec import CODECS, JsonCodec
from ._commit import Committer
from ._config import TaskStateConfig, for_attempt, kept_per_attempt
from ._context import TaskIdentity
from ._errors import ConfigError
from ._reads import Reads
from ._schema import Schema, Upgrade, event_time_ms
from ._transport import Transport
from ._wire import REQUEST_HEADROOM


@dataclass(frozen=True, slots=True)
class TaskParts:
    """One task attempt's settings and the objects every block of it uses."""

    config: TaskStateConfig
    task_id: str
    codec: JsonCodec
    schema: Schema
    transport: Transport
    claims: Claims
    reads: Reads
    committer: Committer


_by_attempt: dict[tuple[object, ...], TaskParts] = {}

# The last block's arguments and parts. A group call's block passes what the one before
# it did (the same TaskIdentity, the same settings), so one comparison finds its parts
# without building and hashing the table's key. Emptied in a forked child, as the table's
# key (its pid) would miss there. One tuple, replaced whole: a block in another thread never
# pairs one block's arguments with another's parts.
_last: tuple[Any, Any] = (None, None)


def _forget_the_last() -> None:
    global _last  # the memo above
    _last = (None, None)


os.register_at_fork(after_in_child=_forget_the_last)


def parts_for(
    ident: TaskIdentity,
    local_property: Callable[[str], str | None],
    *,
    ttl: float | None,
    now: Any,
    version: int,
    upgrade: Mapping[int, Upgrade] | None,
    component: str,
    namespace: str | None,
    sidecar: str | None,
    mode: str,
    durability: str,
    codec: str,
    partitions: int | None,
) -> TaskParts:
    """The parts of the task attempt `ident` for these arguments, built once here.

    The settings (component, namespace, sidecar, mode, durability, codec, partitions) are
    resolved by `_config.for_attempt`.
    """
    global _last  # the memo above
    # each value with its class: 1, 1.0 and True are equal values, not equal arguments
    # (True is no partition count); the table's key and the last block's arguments
    values = (ttl, now, version, component, namespace, sidecar, mode, durability, codec,
              partitions)  # fmt: skip
    given = (ident, values, tuple(map(type, values)))
    last = _last
    try:
        if upgrade is None and given == last[0]:
            return last[1]  # type: ignore[no-any-return]
    except Exception:  # noqa: S110 - an argument with no plain == (an array): the table decides
        pass
    arguments = {"component": component, "namespace": namespace, "sidecar": sidecar,
                 "mode": mode, "durability": durability, "codec": codec,
                 "partitions": partitions}  # fmt: skip
    if upgrade is not None:  # functions: this block's own parts
        return _build(ident, local_property, ttl, now, version, upgrade, arguments)
    parts = kept_per_attempt(
        _by_attempt, (os.getpid(), *given), _build, ident, local_property, ttl, now, version,
        None, arguments,
    )  # fmt: skip
    _last = (given, parts)
    return parts


def _build(
    ident: TaskIdentity,
    local_property: Callable[[str], str | None],
    ttl: float | None,
    now: Any,
    version: int,
    upgrade: Mapping[int, Upgrade] | None,
    arguments: dict[str, Any],
) -> TaskParts:
    c = for_attempt(ident.attempt_id, local_property, **arguments)
    task_id = fq_task_id(c.namespace, c.component, ident.partition)
    if c.partitions is not None and ident.partition >= c.partitions:
        raise ConfigError(
            f"task {task_id}: partition {ident.partition} is outside the "
            f"{c.partitions} partitions declared (partitions={arguments['partitions']!r}): "
            "declare the count the job really splits this component into"
        )
    codec: JsonCodec = CODECS[c.codec]
    schema = Schema(task_id, codec, ttl_s=ttl, version=version, upgrade=upgrade)
    transport = Transport(
        c.target,
        timeout_s=c.timeout_s,
        retry_deadline_s=c.retry_deadline_s,
        max_message_bytes=c.max_message_bytes,
        security=c.security,
    )
    # Claims and Reads get closures over plain values, never a TaskState's bound methods:
    # a reference cycle would keep a finished block's state (a whole dict) alive until
    # Python's cycle collector happened to run
    task = pb.TaskId(namespace=c.namespace, component=c.component, partition=ident.partition)
    who = writer_of(ident)

    def task_msg() -> pb.TaskId:
        return task

    def writer() -> pb.Writer:
        return who

    claims = Claims(task_id, transport, schema, c, ident, task_msg, writer,
                    event_time_ms(task_id, now))  # fmt: skip
    reads = Reads(task_id, transport, schema, task_msg, c.max_message_bytes - REQUEST_HEADROOM)
    committer = Committer(transport, c, task_id, task, who, ident.batch)
    return TaskParts(c, task_id, codec, schema, transport, claims, reads, committer)
