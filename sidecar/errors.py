"""Errors raised inside the sidecar, each carrying a stable wire code.

The gRPC layer (service.py) turns a `SidecarError` into a status plus the code in the
trailing metadata; nothing else crosses the wire.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from taskstate.proto import codes

_STATUS_BY_CODE: dict[str, grpc.StatusCode] = {
    codes.CONFIG: grpc.StatusCode.INVALID_ARGUMENT,
    codes.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    codes.CODEC: grpc.StatusCode.INVALID_ARGUMENT,
    codes.LIMIT: grpc.StatusCode.RESOURCE_EXHAUSTED,
    codes.FENCED: grpc.StatusCode.FAILED_PRECONDITION,
    codes.STATE_AHEAD: grpc.StatusCode.FAILED_PRECONDITION,
    codes.DURABILITY: grpc.StatusCode.FAILED_PRECONDITION,
    codes.CORRUPT_STATE: grpc.StatusCode.DATA_LOSS,
    codes.STATE_LOST: grpc.StatusCode.DATA_LOSS,
    codes.PARTITIONS: grpc.StatusCode.FAILED_PRECONDITION,
    codes.STORAGE_UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    codes.INTERNAL: grpc.StatusCode.INTERNAL,
    codes.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    codes.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    codes.CHANGED: grpc.StatusCode.ABORTED,
    codes.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    codes.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
}


class SidecarError(Exception):
    """A failure with a stable code and a message meant for the operator."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    @property
    def status(self) -> grpc.StatusCode:
        """The gRPC status this error is reported with."""
        return _STATUS_BY_CODE.get(self.code, grpc.StatusCode.INTERNAL)


def fenced(fq: str, current: object) -> SidecarError:
    """A commit or read from an attempt whose epoch is no longer current."""
    return SidecarError(
        codes.FENCED,
        f"task {fq}: this attempt was fenced off: a newer attempt claimed the task "
        f"(current epoch {current}). Nothing of this request was written. "
        "Operator action: none; Spark runs the newer attempt.",
    )


def stale_epoch(fq: str, stored: str, held: int | None) -> SidecarError:
    """A request whose epoch is not Redis' (`stored`; `held`: the request's, if known).

    Behind Redis': a newer attempt fenced it off. Ahead of it: Redis lost the claim.
    """
    if held is not None and stored.isdigit() and int(stored) < held:
        return _claim_lost(fq, stored, held)
    return fenced(fq, stored)


def _claim_lost(fq: str, stored: object, held: int) -> SidecarError:
    """A request whose epoch is ahead of Redis': Redis lost the attempt's claim."""
    return SidecarError(
        codes.STORAGE_UNAVAILABLE,
        f"task {fq}: Redis holds epoch {stored}, below this attempt's {held}: it lost the "
        "attempt's claim (a failover to a replica that had not received it yet). Nothing of "
        "this request was written. The attempt must open the task again: Spark retries the "
        "task; asking again with a new attempt is safe.",
    )


def finished_batch_aside(fq: str, batch: object, what: str) -> SidecarError:
    """A task keeps a finished batch aside (lua/open.lua's stash): `what` must wait."""
    return SidecarError(
        codes.CHANGED,
        f"task {fq}: batch {batch} was finished by one task attempt and then replayed by a "
        "later attempt of the same application that never finished it; the finished state "
        "is kept aside until the query's next batch makes it the state again. Nothing was "
        f"changed. Run the query for one more batch, stop it, then {what}.",
    )


def import_fenced(fq: str, current: object) -> SidecarError:
    """A later request of an import whose task was claimed by someone else meanwhile."""
    return SidecarError(
        codes.FENCED,
        f"task {fq}: another import or a running job claimed the task during this import "
        f"(epoch now {current}); its state is incomplete. Stop the job and import again "
        "with --replace.",
    )


def state_ahead(fq: str, stored_batch: object, batch: object) -> SidecarError:
    """The stored state is at a later batch than the one Spark runs."""
    return SidecarError(
        codes.STATE_AHEAD,
        f"task {fq}: the stored state is at batch {stored_batch}, ahead of batch {batch} "
        "that Spark is running: the streaming checkpoint was reset or replaced. Nothing was "
        "changed. Operator action: restore the checkpoint that belongs to this state, or "
        f"drop the state to start over: `taskstate drop {fq} --yes` for this task, "
        f"`taskstate drop {fq.rsplit('/', 1)[0]} --yes` for every task of the component "
        "(when the whole checkpoint was reset, all of them are ahead).",
    )


def cannot_roll_back(fq: str, batch: object) -> SidecarError:
    """Spark replays a batch whose rollback record was already used."""
    return SidecarError(
        codes.STATE_AHEAD,
        f"task {fq}: Spark is running batch {batch} again, but the state already holds "
        f"batch {batch} and its rollback record was used by an earlier replay (only the "
        "last written batch can be rolled back): the streaming checkpoint is older than "
        "the state. Nothing was changed. Operator action: restore the checkpoint that "
        f"belongs to this state, or drop the state (`taskstate drop {fq} --yes`) to start "
        "over.",
    )


def codec_mismatch(fq: str, stored: str, requested: str) -> SidecarError:
    """The state was written with another codec."""
    return SidecarError(
        codes.CODEC,
        f"task {fq}: the stored state uses codec {stored!r}, not {requested!r}. Nothing was "
        f"changed. Operator action: open it with codec={stored!r}, or drop the state to "
        "start over.",
    )


def corrupt(fq: str, what: str) -> SidecarError:
    """Stored metadata that taskstate did not write."""
    return SidecarError(
        codes.CORRUPT_STATE,
        f"task {fq}: stored metadata is not what taskstate wrote ({what}). Nothing was "
        f"changed. Operator action: inspect it with `taskstate show {fq}`, then restore "
        "Redis from a backup or drop the task's state.",
    )


_LOST_ACTION = (
    "Nothing was changed. Operator action: restore the task from an export "
    "(`taskstate import FILE --replace`), or accept the loss and start it empty "
    "(`taskstate drop {fq} --yes`); then make Redis keep its data (`taskstate doctor`: "
    "persistence, eviction; docs/operations/runbooks.md#state-lost)."
)


def _running(batch: object) -> str:
    return "" if batch is None else f" (Spark runs batch {batch})"


def state_lost_part(fq: str, what: str, detail: list[str], batch: object) -> SidecarError:
    """Half of a task is gone: its data (metadata left) or its metadata (data left)."""
    if what == "data":
        stored_batch, size = (detail + ["?", "?"])[:2]
        lost = (
            f"its metadata says batch {stored_batch} and {size} key(s), but its data is gone "
            "from Redis (evicted, deleted, or lost in a restart or failover)"
        )
    elif what == "stash":
        stored_batch, size = (detail + ["?", "?"])[:2]
        lost = (
            f"the copy of batch {stored_batch} ({size} key(s)) that one attempt finished, kept "
            "aside while a later attempt of the application replayed that batch and never "
            "finished it, is gone from Redis (evicted, deleted, or lost in a restart or "
            "failover)"
        )
    else:
        keys = detail[0] if detail else "?"
        lost = (
            f"{keys} key(s) of its data are in Redis without the metadata that says which "
            "batch they hold (lost in eviction, deletion, a restart or failover); opened "
            "as they are, a replay could count a batch twice"
        )
    return SidecarError(
        codes.STATE_LOST,
        f"task {fq}: {lost}{_running(batch)}. " + _LOST_ACTION.format(fq=fq),
    )


def state_lost_task(fq: str, batch: object) -> SidecarError:
    """The namespace's index records the task, and none of its keys are left."""
    return SidecarError(
        codes.STATE_LOST,
        f"task {fq}: the namespace's index says this task had state, but none of its keys "
        f"are in Redis any more{_running(batch)}: its state was lost, not new. "
        + _LOST_ACTION.format(fq=fq),
    )


def state_lost_behind(
    fq: str,
    stored_batch: str,
    stored_ver: str,
    seen_batch: int | None,
    seen_ver: int,
    batch: object,
) -> SidecarError:
    """Redis holds an older version of the task than this sidecar opened or committed."""
    seen = "" if seen_batch is None else f"batch {seen_batch}, "
    return SidecarError(
        codes.STATE_LOST,
        f"task {fq}: Redis holds batch {stored_batch} (version {stored_ver}), but this "
        f"sidecar saw {seen}version {seen_ver} of the same state committed: Redis lost its "
        "latest commits (a failover to a replica that had not received them, or a restore "
        f"from an older backup){_running(batch)}. Nothing was changed. Operator action: "
        "restore the task from an export (`taskstate import FILE --replace`); or accept "
        f"the older state as it is (`taskstate adopt {fq.split('/')[0]}`: the batches it "
        f"lacks are not replayed), or start it empty (`taskstate drop {fq} --yes`); then "
        "commit with durability replicated:N (docs/operations/runbooks.md#state-lost).",
    )


def state_lost_namespace(
    fq: str, namespace: str, batch: object, similar: Sequence[str] = ()
) -> SidecarError:
    """A streaming task past batch 0 in a namespace Redis has no record of at all.

    `similar`: namespaces of a similar name that hold the task's component (a typo?).
    """
    component = fq.split("/")[1]
    lead = (
        f". Namespace {', '.join(map(repr, similar))} of a similar name holds component "
        f"{component!r}: if that is this query's state, the namespace is misspelt (check "
        "TaskState(namespace=...), TASKSTATE_NAMESPACE or configure(spark, namespace=...)). "
        "Otherwise, the"
        if similar
        else ": the"
    )
    return SidecarError(
        codes.STATE_LOST,
        f"task {fq}: Spark runs batch {batch}, but Redis has no record of namespace "
        f"{namespace!r} at all (no task, no index){lead} state of its earlier batches was "
        "lost (Redis flushed, restarted without persistence, or replaced by an empty one), "
        "or this query has run without taskstate until now. Nothing was changed. Operator "
        f"action: restore the namespace from an export (`taskstate import FILE`); or, to "
        f"start it empty at this batch on purpose, `taskstate adopt {namespace}`; then make "
        "Redis keep its data (`taskstate doctor`; docs/operations/runbooks.md#state-lost).",
    )


def bad_argument(message: str) -> SidecarError:
    """A request that cannot be served as asked (INVALID_ARGUMENT)."""
    return SidecarError(codes.INVALID_ARGUMENT, message)


def partitions_changed(fq: str, recorded: int, declared: int | None) -> SidecarError:
    """An Open under another partition count than the state's, or outside it."""
    ns, comp, part = fq.split("/")
    if declared is not None and declared != recorded:
        now = f"the job now declares {declared} (TaskState partitions={declared})"
        target = declared
    else:
        now = f"this is partition {part}, outside that count"
        target = int(part) + 1
    return SidecarError(
        codes.PARTITIONS,
        f"task {fq}: the state of {ns}/{comp} is split into {recorded} partitions, but "
        f"{now}. Spark's hash partitioning now sends keys to other partitions than the ones "
        "that hold their state. Nothing was changed. Operator action: stop the query and "
        f"run `taskstate rescale {ns}/{comp} --to {target}` (it moves every key to the "
        f"partition Spark gives it for {target}), then start the query again; or run the "
        f"job with {recorded} partitions, as before. A stateful operator keeps the count its "
        "checkpoint has: see docs/how-to/rescale.md.",
    )


def import_partitions(fq: str, recorded: int, imported: int | None) -> SidecarError:
    """An import whose partition count does not fit the component's, or its partition."""
    ns, comp, part = fq.split("/")
    if imported == recorded:
        why = f"partition {part} is outside the {recorded} partitions the export records"
    else:
        shown = "no count" if imported is None else f"{imported} partitions"
        why = (
            f"the state of {ns}/{comp} in Redis is split into {recorded} partitions, and the "
            f"import brings {shown}"
        )
    return SidecarError(
        codes.PARTITIONS,
        f"task {fq}: {why}. Nothing of this task was imported. Operator action: import "
        f"into an empty component (`taskstate drop {ns}/{comp} --yes` forgets its count), "
        "or give the count the exported state was split into (`taskstate import FILE "
        "--partitions N` for an export that lacks it).",
    )


def rescaling(fq: str, to: object) -> SidecarError:
    """An Open while `taskstate rescale` moves the component's keys."""
    ns, comp, _ = fq.split("/")
    return SidecarError(
        codes.PARTITIONS,
        f"task {fq}: `taskstate rescale {ns}/{comp} --to {to}` is moving this component's "
        "keys and has not finished. Nothing was changed. Operator action: wait for it to "
        f"finish; if it was interrupted, run `taskstate rescale {ns}/{comp} --to {to}` again "
        "(it goes on where it stopped), then start the query.",
    )


def rescale_held(fq: str, lock: object) -> SidecarError:
    """A rescale's step on a task that another rescale holds."""
    return SidecarError(
        codes.PARTITIONS,
        f"task {fq} is held by another rescale ({lock}). Nothing more was changed. Finish "
        "that one first (run it again with its --to).",
    )


def not_found(fq: str, namespace: str) -> SidecarError:
    """A task with no stored state (operator commands)."""
    return SidecarError(
        codes.NOT_FOUND,
        f"task {fq}: no state stored. `taskstate ls {namespace}` lists the tasks that have state.",
    )


def already_exists(fq: str) -> SidecarError:
    """An import onto a task that has state."""
    return SidecarError(
        codes.ALREADY_EXISTS,
        f"task {fq}: already has state; nothing was imported. Drop it first "
        f"(`taskstate drop {fq} --yes`) or import with --replace.",
    )


# -- the data source's reads and writes (storage/redis/reads.py, seed.py) ---------------


def seeding(fq: str) -> SidecarError:
    """A task (or component, `ns/comp`) that a `df.write.format("taskstate")` is writing."""
    ns, comp = fq.split("/")[:2]
    what = f"task {fq}" if fq.count("/") == 2 else fq
    return SidecarError(
        codes.PARTITIONS,
        f"{what}: a write of the taskstate data source (df.write.format('taskstate')) "
        f"holds {ns}/{comp} and has not finished; its keys become visible all at once when "
        "it does. Nothing was changed. Operator action: wait for the write to end; if its "
        f"job died, `taskstate ls {ns}` finishes or undoes it once its lease has run out.",
    )


def seed_gone(namespace: str, component: str, seed_id: str) -> SidecarError:
    """A write's step after the write ended (finished, aborted, or undone as abandoned)."""
    return SidecarError(
        codes.FENCED,
        f"{namespace}/{component}: the write {seed_id} is no longer under way (it was "
        "aborted, or undone after no call reached the sidecar within its lease, or another "
        "write replaced it). Nothing of it is visible. Write again (a longer leaseSeconds "
        "if its tasks are slow to start).",
    )


def seed_duplicate(namespace: str, component: str, key: str) -> SidecarError:
    """A key written twice by one write."""
    return SidecarError(
        codes.INVALID_ARGUMENT,
        f"{namespace}/{component}: key {key[:80]!r} appears more than once in the written "
        "DataFrame. Nothing was written. Give each key one row (e.g. dropDuplicates(['key']) "
        "or an aggregation).",
    )


def not_covered(fq: str, since: int, covered: int) -> SidecarError:
    """ChangesSinceBatch older than the change log reaches."""
    return SidecarError(
        codes.NOT_FOUND,
        f"task {fq}: the change log holds the changes after batch {covered} and later, not "
        f"those after batch {since}. Read the whole state instead, or a batch >= {covered}.",
    )


def event_time_needed(fq: str) -> SidecarError:
    """A block without an event time in a component whose keys expire in event time."""
    return SidecarError(
        codes.CONFIG,
        f"task {fq}: this component's keys expire in event time (an earlier block passed "
        "TaskState(now=...)), and this block passed none. Nothing was changed. Pass now= "
        "(the batch's watermark, or the largest event time the task has seen) in every "
        "block of the component.",
    )
