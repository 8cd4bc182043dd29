"""Every setting a task reads from its environment: its variable, default and meaning.

The one place that names them: the client reads each through its `Setting`, and the docs'
settings table (docs/reference/settings.md) is generated from `SETTINGS`.
Precedence: argument > environment > Spark local property > default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One setting: its environment variable, default, and what it means."""

    env: str
    default: T
    meaning: str
    argument: str = ""  # the TaskState argument that overrides it, if any
    local_property: str = ""  # the Spark local property that sets it, if any
    shown: str = ""  # the default as the docs show it, where `default` says too little


NAMESPACE = Setting(
    "TASKSTATE_NAMESPACE",
    None,
    "The job's stable name across restarts (never the Spark application id).",
    argument="namespace",
    local_property="taskstate.namespace",
    shown="none: an error names what to set",
)
SIDECAR = Setting(
    "TASKSTATE_SIDECAR",
    "unix:///tmp/taskstate-run/sidecar.sock",
    "The sidecar's address, `unix:///PATH` or `tcp://HOST:PORT`. Without one, the "
    "sidecar the executor plugin started for this executor, then the default.",
    argument="sidecar",
    local_property="taskstate.sidecar",
)
TIMEOUT = Setting(
    "TASKSTATE_TIMEOUT",
    30.0,
    "Per-call deadline, seconds: a call the sidecar does not answer by then is retried, "
    "within the retry deadline.",
)
RETRY_DEADLINE = Setting(
    "TASKSTATE_RETRY_DEADLINE",
    30.0,
    "How long a task retries an unreachable sidecar, seconds, before it raises "
    "SidecarUnavailableError.",
)
MAX_MESSAGE_BYTES = Setting(
    "TASKSTATE_MAX_MESSAGE_BYTES",
    64 << 20,
    "The largest request, bytes (at least 65536). In a micro-batch a larger commit is "
    "sent as several; in a batch job a commit must fit (else LimitError).",
)
CACHE_TASKS = Setting(
    "TASKSTATE_CACHE_TASKS",
    16,
    "Tasks whose committed state a worker process keeps cached for the task's next "
    "attempt or batch.",
)
CACHE_BYTES = Setting(
    "TASKSTATE_CACHE_BYTES",
    256 << 20,
    "Bytes of cached state a worker process keeps (estimated); the least recently used "
    "tasks' state is dropped past it. An executor holds at most its Python workers times "
    "this, plus its running tasks' state.",
    shown="268435456 (256 MiB)",
)
LOAD = Setting(
    "TASKSTATE_LOAD",
    "on-demand",
    "How a worker without a copy of the task gets its state: `on-demand` (the keys it "
    "touches) or `eager` (the whole state at Open).",
)
FRAME_LANE = Setting(
    "TASKSTATE_FRAME_LANE",
    "on",
    "`off`: every call over gRPC, never the sidecar's frame lane (a Unix sidecar's "
    "`X.frames.sock`, which carries a task's Open, Commit and reads at a sixth of gRPC's "
    "CPU).",
)
RUN_DIR = Setting(
    "TASKSTATE_RUN_DIR",
    "/tmp/taskstate-run",  # noqa: S108 - the plugin's socket rendezvous
    "Where the executor plugin's sidecars listen (`jvm-<executor pid>.sock`), and where "
    "a task looks for its executor's sidecar.",
)
TLS_CA = Setting(
    "TASKSTATE_SIDECAR_TLS_CA",
    None,
    "CA bundle that signed the sidecar's certificate (a TCP sidecar needs TLS).",
    shown="none",
)
TLS_CERT = Setting(
    "TASKSTATE_SIDECAR_TLS_CERT",
    None,
    "Client certificate for mutual TLS (with TASKSTATE_SIDECAR_TLS_KEY).",
    shown="none",
)
TLS_KEY = Setting(
    "TASKSTATE_SIDECAR_TLS_KEY",
    None,
    "The client certificate's private key (with TASKSTATE_SIDECAR_TLS_CERT).",
    shown="none",
)
TLS_SERVER_NAME = Setting(
    "TASKSTATE_SIDECAR_TLS_SERVER_NAME",
    None,
    "The name to check in the sidecar's certificate when it differs from the host dialled.",
    shown="the host dialled",
)
TOKEN_FILE = Setting(
    "TASKSTATE_TOKEN_FILE",
    None,
    "A file holding the token sent on every call to a sidecar started with "
    "`--tokens-file`; read again at each task attempt. Wins over TASKSTATE_TOKEN.",
    shown="none",
)
TOKEN = Setting(
    "TASKSTATE_TOKEN",
    None,
    "The token itself, where a file is not practical.",
    shown="none",
)

SETTINGS = (
    NAMESPACE,
    SIDECAR,
    TIMEOUT,
    RETRY_DEADLINE,
    MAX_MESSAGE_BYTES,
    CACHE_TASKS,
    CACHE_BYTES,
    LOAD,
    FRAME_LANE,
    RUN_DIR,
    TLS_CA,
    TLS_CERT,
    TLS_KEY,
    TLS_SERVER_NAME,
    TOKEN_FILE,
    TOKEN,
)
