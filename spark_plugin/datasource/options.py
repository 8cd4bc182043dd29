"""The data source's options, read once and checked, with errors that name the option.

Spark hands a data source its options as strings (case-insensitive names). Everything a
reader or writer needs later is in `Options`, a frozen dataclass that pickles to the
executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from taskstate.client import ConfigError
from taskstate.proto import ids

FORMAT = "taskstate"


@dataclass(frozen=True, slots=True)
class Options:
    """The options of one read or write."""

    namespace: str
    component: str
    sidecar: str | None = None  # unix:///... or tcp://host:port
    redis_url: str | None = None  # a private sidecar for this Redis, per Python process
    token_file: str | None = None
    batch_id: int | None = None  # read: every task at exactly this batch; write: record it
    changes_since_batch: int | None = None  # read: only keys changed after this batch
    partitions: int | None = None  # write: the count the keys are placed by
    quiet_seconds: float | None = None  # write: refused while the component ran this recently
    lease_seconds: float | None = None  # write: abandoned after this long without a call
    page_keys: int = 5000  # keys a write sends in one call

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, writing: bool) -> Options:
        """Check Spark's option strings; ConfigError names the bad one and the fix."""
        opts = {k.lower(): v for k, v in raw.items()}
        known = {"namespace", "component", "sidecar", "redisurl", "tokenfile", "batchid",
                 "changessincebatch", "partitions", "quietseconds", "leaseseconds",
                 "pagekeys", "path"}  # fmt: skip
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ConfigError(
                f"{FORMAT} data source: unknown option(s) {', '.join(unknown)}; it takes "
                "namespace, component, sidecar or redisUrl, tokenFile, batchId, "
                "changesSinceBatch (read), partitions, quietSeconds, leaseSeconds (write)"
            )
        names = {}
        for kind in ("namespace", "component"):
            value = opts.get(kind, "")
            if not value:
                raise ConfigError(
                    f"{FORMAT} data source: option {kind!r} is missing: "
                    f'.option("{kind}", ...) names the {kind} whose state is '
                    f"{'written' if writing else 'read'}"
                )
            problem = ids.name_problem(kind, value)
            if problem:
                raise ConfigError(f"{FORMAT} data source: {problem}")
            names[kind] = value
        if opts.get("sidecar") and opts.get("redisurl"):
            raise ConfigError(
                f"{FORMAT} data source: give option sidecar or option redisUrl, not both"
            )
        where = f"{names['namespace']}/{names['component']}"
        parsed = cls(
            namespace=names["namespace"],
            component=names["component"],
            sidecar=opts.get("sidecar") or None,
            redis_url=opts.get("redisurl") or None,
            token_file=opts.get("tokenfile") or None,
            batch_id=_int(opts, "batchId", where, minimum=-1),
            changes_since_batch=_int(opts, "changesSinceBatch", where, minimum=-1),
            partitions=_int(opts, "partitions", where, minimum=1),
            quiet_seconds=_float(opts, "quietSeconds", where),
            lease_seconds=_float(opts, "leaseSeconds", where),
            page_keys=_int(opts, "pageKeys", where, minimum=1) or 5000,
        )
        if writing:
            if parsed.partitions is None:
                raise ConfigError(
                    f"{FORMAT} data source, writing {where}: option 'partitions' is missing: "
                    "the partition count of the job that will read this state (as in its "
                    'repartition(N, "key")); each key goes to the task that count sends it to'
                )
            if parsed.changes_since_batch is not None:
                raise ConfigError(f"{FORMAT} data source: changesSinceBatch is for reads")
        elif parsed.partitions is not None or parsed.quiet_seconds is not None:
            raise ConfigError(
                f"{FORMAT} data source, reading {where}: partitions and quietSeconds are "
                "options of a write"
            )
        return parsed

    @property
    def where(self) -> str:
        """`namespace/component`, for messages."""
        return f"{self.namespace}/{self.component}"


def _int(opts: Mapping[str, str], name: str, where: str, *, minimum: int) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"{FORMAT} data source ({where}): option {name}={raw!r} is not a whole number"
        ) from None
    if value < minimum:
        raise ConfigError(
            f"{FORMAT} data source ({where}): option {name}={raw!r} must be at least {minimum}"
        )
    return value


def _float(opts: Mapping[str, str], name: str, where: str) -> float | None:
    raw = opts.get(name.lower())
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(
            f"{FORMAT} data source ({where}): option {name}={raw!r} is not a number of seconds"
        ) from None
    if value < 0:
        raise ConfigError(f"{FORMAT} data source ({where}): option {name}={raw!r} is negative")
    return value
