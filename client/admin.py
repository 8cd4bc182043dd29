"""The operators' client: see inside stored state, move it, edit it, check the setup.

    from taskstate.client.admin import AdminClient

    with AdminClient("unix:///tmp/taskstate-run/sidecar.sock") as admin:
        for t in admin.tasks("shop", "totals"):
            print(t.task.partition, t.committed_batch, t.size)
        state, version = admin.read("shop/totals/3")

It talks to a sidecar (which holds the Redis credentials) and claims no task: a read is
the committed state as the next attempt of the task would restore it. Answers are the
messages of `taskstate.proto` (TaskInfo, RescaleProgress, ...); failures are
`TaskStateError`s, as for `TaskState`. TLS and the token come from the environment, as
for tasks (`TASKSTATE_SIDECAR_TLS_*`, `TASKSTATE_TOKEN_FILE`, `TASKSTATE_TOKEN`). The
`taskstate` command is built on it.
"""

from __future__ import annotations

import os
import random
import re
import stat
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from taskstate.proto import ids
from taskstate.proto import taskstate_pb2 as pb
from taskstate.proto.durability import Durability

from ._codec import CODECS
from ._errors import ConfigError, SidecarUnavailableError, StateChangedError, TaskStateError
from ._security import SidecarSecurity
from ._transport import Transport
from ._wire import text_pairs
from ._wires import CallFailed
from .address import DEFAULT_RUN_DIR, DEFAULT_SIDECAR, ENV_RUN_DIR, ENV_SIDECAR, grpc_target

_PLUGIN_SOCKET = re.compile(r"jvm-(\d+)\.sock")
READ_ATTEMPTS = 8  # with jittered, doubling pauses: about 4 s at most
MAX_MESSAGE_BYTES = 256 << 20


def task_id(text: str) -> pb.TaskId:
    """`NAMESPACE/COMPONENT/PARTITION` as a wire task id; ConfigError names what is wrong."""
    parts = text.split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        raise ConfigError(
            f"{text!r}: name a task as NAMESPACE/COMPONENT/PARTITION, e.g. jobs/ewma/0"
        )
    for problem in (
        ids.name_problem("namespace", parts[0]),
        ids.name_problem("component", parts[1]),
        ids.partition_problem(int(parts[2])),
    ):
        if problem:
            raise ConfigError(problem)
    return pb.TaskId(namespace=parts[0], component=parts[1], partition=int(parts[2]))


def plugin_sidecars(run_dir: str | None = None) -> list[str]:
    """The sidecars the executor plugin runs on this machine, as `unix://` addresses.

    The plugin's sidecar of executor JVM `pid` listens on `RUN_DIR/jvm-<pid>.sock`
    (`$TASKSTATE_RUN_DIR`, else /tmp/taskstate-run); a socket whose JVM is gone is left
    out, and so is each executor's flush barrier socket (`jvm-<pid>.barrier.sock`).
    """
    folder = Path(run_dir or os.environ.get(ENV_RUN_DIR) or DEFAULT_RUN_DIR)
    found = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for name in names:
        m = _PLUGIN_SOCKET.fullmatch(name)
        try:
            if m is None or not stat.S_ISSOCK((folder / name).lstat().st_mode):
                continue
        except OSError:
            continue  # removed meanwhile
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            continue  # its executor is gone (killed: nothing removed the socket)
        except PermissionError:
            pass  # another user's JVM: alive
        found.append(f"unix://{folder / name}")
    return found


def _fq(task: pb.TaskId) -> str:
    return ids.fq_task_id(task.namespace, task.component, task.partition)


def _scope(request: Any) -> str:
    return f"{request.namespace}/{request.component}"


class AdminClient:
    """A connection to one sidecar for operators' calls (what the `taskstate` CLI uses).

    Reads take no claim: they never disturb a running job. Each method raises the
    TaskStateError its call met (NotFoundError, StateChangedError, ...).

    Example:
        ```python
        with AdminClient("unix:///tmp/taskstate-run/sidecar.sock") as admin:
            for task in admin.tasks("shop-totals"):
                print(task)
            values, version = admin.read("shop-totals/running-totals/3")
        ```

    Args:
        sidecar: `unix:///PATH` or `tcp://HOST:PORT`; else `TASKSTATE_SIDECAR`; else
            `unix:///tmp/taskstate-run/sidecar.sock`.
        timeout_s: the deadline of each call (reads and rescales stream past it).
        token_file: the token for a sidecar that asks for one (else the environment's).
    """

    def __init__(
        self,
        sidecar: str | None = None,
        *,
        timeout_s: float = 60.0,
        token_file: str | None = None,
        security: SidecarSecurity | None = None,
    ) -> None:
        self.sidecar = sidecar or os.environ.get(ENV_SIDECAR) or DEFAULT_SIDECAR
        self.target = grpc_target(self.sidecar)
        self.timeout_s = timeout_s
        self.security = security or SidecarSecurity.from_env(token_file=token_file)
        self.transport = Transport(
            self.target,
            timeout_s=timeout_s,
            retry_deadline_s=0,  # an operator's call fails at once: the operator retries
            max_message_bytes=MAX_MESSAGE_BYTES,
            security=self.security,
            unavailable=self._unavailable,
            own=True,
        )
        self.rereads = 0  # reads started again because a commit landed mid-read

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.transport.close()

    def _call(self, method: str, request: Any, task: str | None = None) -> Any:
        return self.transport.unary(method, request, task)

    def _unavailable(self, failed: CallFailed, task: str | None) -> TaskStateError:
        """An unreachable sidecar is not one "beside this executor" here."""
        status = failed.status.name if failed.status is not None else "UNAVAILABLE"
        return SidecarUnavailableError(
            f"no sidecar answers at {self.sidecar} ({status}: {failed.details})", task
        )

    # -- the sidecar itself ------------------------------------------------------------

    def health(self, timeout_s: float | None = None) -> str:
        """The sidecar's gRPC health: "SERVING", or "NOT_SERVING" while Redis is away.

        SidecarUnavailableError when it does not answer at all.
        """
        health = health_pb2_grpc.HealthStub(self.transport.grpc_wire.channel)
        try:
            r = health.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s or self.timeout_s
            )
        except grpc.RpcError as exc:
            raise self.transport.grpc_error(exc, None) from None
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))

    def doctor(self, durability: Durability | str = "applied") -> pb.DoctorResponse:
        """What the sidecar sees of its Redis, and whether `durability` is possible there."""
        if isinstance(durability, str):
            try:
                durability = Durability.parse(durability)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        kind, replicas = durability.to_wire()
        r: pb.DoctorResponse = self._call(
            "Doctor", pb.DoctorRequest(durability=kind, replicas=replicas)
        )
        return r

    # -- seeing inside ---------------------------------------------------------------

    def namespaces(self) -> list[str]:
        """Every namespace with stored state (that the token may see)."""
        return list(self._call("List", pb.ListRequest()).namespaces)

    def tasks(self, namespace: str, component: str | None = None) -> list[pb.TaskInfo]:
        """The tasks of a namespace (or of one component), with their metadata."""
        req = pb.ListRequest(namespace=namespace, component=component or "")
        return list(self._call("List", req).tasks)

    def describe(self, task: pb.TaskId | str) -> pb.TaskInfo:
        """One task's metadata (`exists` false when it has no state)."""
        task = task_id(task) if isinstance(task, str) else task
        r: pb.TaskInfo = self._call("Describe", pb.DescribeRequest(task=task), _fq(task))
        return r

    def read(
        self,
        task: pb.TaskId | str,
        pattern: str = "",
        on_reread: Callable[[str], None] | None = None,
    ) -> tuple[dict[str, bytes], str]:
        """The committed state (one version) and that version.

        Read again while commits land mid-read (up to READ_ATTEMPTS times; `on_reread`
        hears of each). `pattern`: only keys matching this glob. Values are the stored
        bytes (JSON text).
        """
        task = task_id(task) if isinstance(task, str) else task
        fq = _fq(task)
        for attempt in range(READ_ATTEMPTS):
            out: dict[str, bytes] = {}
            version = ""
            try:
                for chunk in self.read_chunks(pb.ReadRequest(task=task, pattern=pattern)):
                    out.update(zip(*text_pairs(fq, chunk.packed), strict=True))
                    if chunk.last:
                        version = chunk.version
                return out, version
            except StateChangedError:
                if attempt == READ_ATTEMPTS - 1:
                    raise
                self.read_again(attempt, fq, on_reread)
        raise AssertionError("unreachable")  # pragma: no cover

    def read_chunks(self, request: pb.ReadRequest) -> Generator[pb.ReadChunk, None, None]:
        """The chunks of one Read as they arrive (no deadline: a large state takes a while).

        One version, or StateChangedError at the end when a commit landed meanwhile: the
        caller keeps what it got apart until the last chunk (`last`: version and batch).
        On the frame lane each chunk must come within the client's timeout of the one before.
        """
        yield from self.transport.stream("Read", request, _fq(request.task))

    def read_again(
        self, attempt: int, fq: str, on_reread: Callable[[str], None] | None = None
    ) -> None:
        """Count a read started again after StateChangedError, and pause before it.

        Jittered and doubling, so that a read does not keep phase with a job committing
        at a steady pace.
        """
        self.rereads += 1
        if on_reread is not None:
            on_reread(fq)
        time.sleep(min(1.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))  # noqa: S311 - timing

    # -- changing stored state ---------------------------------------------------------

    def import_task(self, request: pb.ImportRequest) -> pb.ImportResponse:
        """One request of an import (the first creates the task; `append` ones extend it)."""
        r: pb.ImportResponse = self._call("Import", request, _fq(request.task))
        return r

    def drop(
        self, namespace: str, component: str | None = None, partition: int | None = None
    ) -> int:
        """Delete stored state: a namespace, a component or a task; how many tasks."""
        req = pb.DropRequest(namespace=namespace, component=component or "")
        if partition is not None:
            req.partition = partition
        return int(self._call("Drop", req).tasks_dropped)

    def sweep(
        self, namespace: str, component: str | None = None, *, idle_seconds: float = 60.0
    ) -> tuple[int, int]:
        """Delete the expired keys of idle tasks: (tasks looked at, keys deleted)."""
        req = pb.SweepRequest(namespace=namespace, component=component or "",
                              idle_seconds=idle_seconds)  # fmt: skip
        r = self._call("Sweep", req, namespace)
        return int(r.tasks), int(r.keys)

    def adopt(self, namespace: str) -> pb.AdoptResponse:
        """Record that the namespace's query goes on from the batch it runs next."""
        r: pb.AdoptResponse = self._call("Adopt", pb.AdoptRequest(namespace=namespace))
        return r

    def rescale(
        self,
        namespace: str,
        component: str,
        to: int,
        *,
        key_type: str = "string",
        quiet_seconds: float = 30.0,
    ) -> Iterator[pb.RescaleProgress]:
        """Move a component's keys to `to` partitions; its progress, ending with "done"."""
        req = pb.RescaleRequest(namespace=namespace, component=component, to=to,
                                key_type=key_type, quiet_seconds=quiet_seconds)  # fmt: skip
        # no deadline: a large state takes a while
        yield from self.transport.stream("Rescale", req, f"{namespace}/{component}")

    def set(self, task: pb.TaskId | str, key: str, value: Any) -> pb.EditResponse:
        """Set one key of a task to a JSON value; the job sees it from its next batch."""
        task = task_id(task) if isinstance(task, str) else task
        encoded = CODECS["json"].encode(_fq(task), key, value)
        return self._edit(pb.EditRequest(namespace=task.namespace, component=task.component,
                                         partition=task.partition, key=key, value=encoded,
                                         codec="json"), _fq(task))  # fmt: skip

    def delete(self, task: pb.TaskId | str, key: str) -> pb.EditResponse:
        """Delete one key of a task; the job sees it from its next batch."""
        task = task_id(task) if isinstance(task, str) else task
        return self._edit(pb.EditRequest(namespace=task.namespace, component=task.component,
                                         partition=task.partition, key=key, delete=True,
                                         codec="json"), _fq(task))  # fmt: skip

    def erase(self, namespace: str, component: str, key: str) -> pb.EditResponse:
        """Delete a key from every task of a component (an erasure request)."""
        req = pb.EditRequest(namespace=namespace, component=component, key=key, delete=True)
        return self._edit(req, f"{namespace}/{component}")

    # -- writes of the data source (sidecar/storage/redis/seed.py) ----------------------

    def seed_begin(self, request: pb.SeedBeginRequest) -> pb.SeedBeginResponse:
        """Begin a write: the component is held until `seed_commit` or `seed_abort`."""
        r: pb.SeedBeginResponse = self._call("SeedBegin", request, _scope(request))
        return r

    def seed_stage(self, request: pb.SeedStageRequest) -> int:
        """Stage one page of a Spark task's keys; how many."""
        return int(self._call("SeedStage", request, _scope(request)).keys)

    def seed_commit(self, request: pb.SeedCommitRequest) -> pb.SeedCommitResponse:
        """Make the write visible, all at once."""
        r: pb.SeedCommitResponse = self._call("SeedCommit", request, _scope(request))
        return r

    def seed_abort(self, namespace: str, component: str, seed_id: str) -> bool:
        """Undo a write; False when it was no longer under way."""
        req = pb.SeedAbortRequest(namespace=namespace, component=component, seed_id=seed_id)
        return bool(self._call("SeedAbort", req, f"{namespace}/{component}").undone)

    def settle(self, namespace: str, component: str | None = None) -> list[str]:
        """Finish or undo abandoned writes of the namespace; what was done, one line each."""
        req = pb.SettleRequest(namespace=namespace, component=component or "")
        return list(self._call("Settle", req, namespace).settled)

    def _edit(self, request: pb.EditRequest, what: str) -> pb.EditResponse:
        r: pb.EditResponse = self._call("Edit", request, what)
        return r
