"""The only place that spells a Redis key of taskstate.

Every key of a task carries the hash tag `{namespace/component/partition}`, so a task lives
in one Redis Cluster slot and one script can touch all its keys:

- `ts:{ns/comp/p}:data`  hash, field = user key, value = encoded value
- `ts:{ns/comp/p}:meta`  hash: layout, codec, batch, epoch, pos, gen, ver, the claim
  (claim, claim_batch, superseded), the rollback bookkeeping, updated_at, last_writer,
  size (the data's size after the last write: lua/open.lua tells lost data by it), ...
- `ts:{ns/comp/p}:undo`  hash: the rollback record of the last written batch
- `ts:{ns/comp/p}:log`   hash: the change log, field `<v>` = the keys version v changed (a
  msgpack array), `#<v>` = how many (lua/commit.lua); delta restores read it
- `ts:idx:{ns}`          set of `component/partition`: the index, for listing and for
                         telling a task whose keys were all lost from a new one
- `ts:ns:{ns}`           hash: the namespace's record beyond its index (`adopted_at`,
                         `reset_at`): written by `taskstate adopt` and `drop`, so a
                         namespace whose index is empty is still known (same slot);
                         and per component `partitions/<comp>` (its partition count)
                         and `rescale/<comp>` (a `taskstate rescale` under way, JSON)
- `ts:{ns/comp/p}:ttl`    sorted set: key -> its expiry (epoch ms) or an earlier time, of
                         the keys written with a time to live (a value's envelope,
                         taskstate/proto/envelope.py), kept by the scripts that write
                         (a rollback rebuilds it)
- `ts:{ns/comp/p}:stash`  hash: a batch another attempt finished, as it was when a late
                         attempt of the same application rolled it back (lua/open.lua):
                         made the state again at the next batch if the late attempt
                         never finished; dropped when it did (lua/done.lua), and with
                         the task's generation by an import or an overwriting write
                         (lua/import.lua, lua/seed_publish.lua)
- `ts:{ns/comp/p}:edits`  hash: operators' edits (`taskstate set/del/erase`) to apply again
                         at the task's next batch, key -> value ('' : delete)
- `ts:{ns/comp/p}:stage`, `:stage_undo`  a rescale's new data and rollback record for
                         target task p, renamed into place when p is written (rescale.py)
- `ts:{ns/comp/p}:seed:<id>:<s>.<a>`  the keys attempt a of Spark task (partition) s of
                         data source write <id> staged for task p; `:seed:<id>:att` the set
                         of the attempts that staged here; `:seed:<id>:stage` the merged
                         keys, made the task's state in one step (seed.py)
- in `ts:ns:{ns}`, per component `seed/<comp>` (a data source write under way, JSON) and
                         `seed_alive/<comp>` (when it was last heard of)

A streaming task at batch > 0 whose namespace has neither an index nor a record finds a
Redis that lost everything (or a query that adds taskstate late): store.py refuses it.

Tests, benchmarks and tools that look at Redis directly use these functions too.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from taskstate.proto.ids import fq_task_id

from ..values import TaskKey

Kind = Literal["data", "meta", "undo", "log", "edits", "stage", "stage_undo", "ttl", "stash"]


class ComponentRecord(NamedTuple):
    """What the namespace's record says of one component."""

    partitions: int | None  # the recorded partition count
    rescale: str | None  # a rescale under way (its plan, JSON)
    seed: str | None = None  # a write of the data source under way (its plan, JSON)


def component_fields(component: str) -> tuple[str, str]:
    """The component's fields in the namespace's record: (partition count, rescale)."""
    return f"partitions/{component}", f"rescale/{component}"


def seed_fields(component: str) -> tuple[str, str]:
    """A data source write's fields in the namespace's record: (plan, last heard of)."""
    return f"seed/{component}", f"seed_alive/{component}"


def seed_key(task: TaskKey, seed_id: str, attempt: str) -> str:
    """What one attempt of a Spark task of data source write `seed_id` staged for `task`.

    `attempt`: "<source>.<attempt>", the Spark task's partition and attempt number.
    """
    return f"ts:{{{task.fq}}}:seed:{seed_id}:{attempt}"


def seed_keys(task: TaskKey, seed_id: str) -> tuple[str, str]:
    """(stage, att): a data source write's merged keys for `task`, and its sources' attempts."""
    return f"ts:{{{task.fq}}}:seed:{seed_id}:stage", f"ts:{{{task.fq}}}:seed:{seed_id}:att"


def task_key(namespace: str, component: str, partition: int | str, kind: Kind) -> str:
    """One key of a task (`partition` may be a glob such as `*` in a SCAN pattern)."""
    return f"ts:{{{fq_task_id(namespace, component, partition)}}}:{kind}"


def data_key(namespace: str, component: str, partition: int | str) -> str:
    """The task's state hash."""
    return task_key(namespace, component, partition, "data")


def meta_key(namespace: str, component: str, partition: int | str) -> str:
    """The task's metadata hash."""
    return task_key(namespace, component, partition, "meta")


def task_keys(task: TaskKey) -> tuple[str, str, str, str]:
    """(meta, data, undo, log) keys of a task, in the order the scripts take them."""
    n, c, p = task.namespace, task.component, task.partition
    return (
        task_key(n, c, p, "meta"),
        task_key(n, c, p, "data"),
        task_key(n, c, p, "undo"),
        task_key(n, c, p, "log"),
    )


def ttl_key(task: TaskKey) -> str:
    """The task's expiry index.

    It maps the keys written with a time to live to their expiry (epoch ms) or an earlier
    time (a key written again keeps its earlier entry: prelude.lua ttl_sync); a rollback
    rebuilds it from the restored data (open.lua).
    """
    return task_key(task.namespace, task.component, task.partition, "ttl")


def stash_key(task: TaskKey) -> str:
    """A finished batch kept aside while a late attempt replays it (lua/open.lua)."""
    return task_key(task.namespace, task.component, task.partition, "stash")


def edits_key(task: TaskKey) -> str:
    """The task's kept edits (lua/edit.lua, lua/open.lua)."""
    return task_key(task.namespace, task.component, task.partition, "edits")


def every_key(task: TaskKey) -> tuple[str, ...]:
    """Every key a task may have: what deleting the task deletes."""
    n, c, p = task.namespace, task.component, task.partition
    return (*task_keys(task), edits_key(task), task_key(n, c, p, "stage"),
            task_key(n, c, p, "stage_undo"), ttl_key(task), stash_key(task))  # fmt: skip


def index_member(task: TaskKey) -> str:
    """The task's member in its namespace's index set: `component/partition`."""
    return f"{task.component}/{task.partition}"


def index_task(namespace: str, member: str) -> TaskKey | None:
    """The task an index member names (None: not a `component/partition` member)."""
    comp, _, part = member.rpartition("/")
    return TaskKey(namespace, comp, int(part)) if comp and part.isdigit() else None


def index_key(namespace: str) -> str:
    """The per-namespace index set (its own slot)."""
    return "ts:idx:{" + namespace + "}"


def namespace_key(namespace: str) -> str:
    """The namespace's record (the index's slot)."""
    return "ts:ns:{" + namespace + "}"


def namespace_pattern(namespace: str) -> str:
    """A SCAN pattern for every key of a namespace's tasks and its index."""
    return f"ts:*{namespace}*"
