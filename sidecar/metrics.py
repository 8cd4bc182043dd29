"""Prometheus metrics of the sidecar, served on `--metrics-port` (off by default).

Labels are bounded: the RPC method, a stable error code, the Redis operation. Never a
task id or a namespace: one series per task would grow without limit on a large job.
Per-task facts are in the logs (every record of a request carries task, batch and epoch)
and in `taskstate show`. One exception, bounded by the restores running at once:
`taskstate_restore_progress_keys{task, kind}` exists only while that task's restore runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("taskstate.sidecar.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)

_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

REQUESTS = Counter(
    "taskstate_requests",
    "Requests answered (gRPC or the frame lane), by method and outcome code: 'ok', a "
    "taskstate error code (FENCED, STATE_AHEAD, DURABILITY, STORAGE_UNAVAILABLE, ...), or "
    "CANCELLED for a stream its reader left before its end. A Read is counted by what it "
    "reads: Restore (a task attempt's state, or its changes since a version), Get (a task "
    "attempt's keys), Read (claim-free).",
    ["method", "code"],
    registry=REGISTRY,
)


class InFlight(Collector):
    """taskstate_requests_in_flight: plain counts by method, turned into a gauge at scrape.

    Every call goes in and out of it twice on the hot path; a prometheus Gauge child takes
    a lock for each (about 1% of the sidecar's CPU per block, docs/benchmarks.md, figure
    19). The counts are changed on the event loop only; a scrape (the metrics server's
    thread) reads a copy.
    """

    name = "taskstate_requests_in_flight"
    documentation = (
        "Requests being served now (gRPC or the frame lane), by method; for Attach, the "
        "Python workers attached for deferred group commits (a long-lived stream each)."
    )
    labels = ("method",)

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauge, a sample per method served since the start."""
        gauge = GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        for method, n in sorted(dict(self.counts).items()):
            gauge.add_metric([method], n)
        yield gauge

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """What `collect` yields (its name, for the registry's check of duplicates)."""
        yield GaugeMetricFamily(self.name, self.documentation, labels=self.labels)


IN_FLIGHT = InFlight()
REGISTRY.register(IN_FLIGHT)
FRAME_CONNECTIONS = Gauge(
    "taskstate_frame_lane_connections",
    "Client connections open on the frame lane (a task's calls without gRPC): one per "
    "Python worker process and thread that made a task call, one per data source read or "
    "export under way; 0 while every client speaks gRPC.",
    registry=REGISTRY,
)
COMMITS = Counter(
    "taskstate_commits",
    "Commits applied (acknowledged to the client).",
    registry=REGISTRY,
)
COMMIT_SECONDS = Histogram(
    "taskstate_commit_seconds",
    "Time to apply one commit, from request to acknowledgement (durability included).",
    buckets=_LATENCY,
    registry=REGISTRY,
)
COMMIT_BYTES = Counter(
    "taskstate_commit_bytes",
    "Bytes of keys and encoded values written by applied commits.",
    registry=REGISTRY,
)
COMMIT_KEYS = Counter(
    "taskstate_commit_keys",
    "Keys written or deleted by applied commits.",
    registry=REGISTRY,
)
FENCED = Counter(
    "taskstate_fenced_commits",
    "Commits (and Opens of displaced attempts) refused because a newer attempt of the task "
    "holds the claim (zombie writers).",
    registry=REGISTRY,
)
ROLLBACKS = Counter(
    "taskstate_replay_rollbacks",
    "Opens by a new attempt of a batch that rolled the batch back before the retry counted "
    "it again (real replays only: a task attempt's own second worker shares its claim).",
    registry=REGISTRY,
)
CLAIMS_REUSED = Counter(
    "taskstate_claims_reused",
    "Opens by a task attempt that already held the claim: another Python worker serving "
    "the same attempt (applyInPandasWithState's timed-out groups). Same epoch, no rollback.",
    registry=REGISTRY,
)
ROLLED_BACK_KEYS = Counter(
    "taskstate_replay_rollback_keys",
    "Keys restored to their value before a replayed batch.",
    registry=REGISTRY,
)
RESTORE_KEYS = Counter(
    "taskstate_restore_keys",
    "Keys sent to workers by Restore.",
    registry=REGISTRY,
)
RESTORES = Counter(
    "taskstate_restores",
    "Restores answered, by kind: 'delta' (only what changed since the version the worker "
    "held, from the change log), 'full' (the whole state) or 'not_covered' (a worker reading "
    "on demand asked for a delta the change log no longer covers, and got nothing). "
    "Mostly 'full' or 'not_covered' in a steady job: tasks wait longer between visits to a "
    "worker than the change log keeps.",
    ["kind"],
    registry=REGISTRY,
)
GET_KEYS = Counter(
    "taskstate_get_keys",
    "Keys a task attempt read by name (remote mode, and mirror mode's on-demand reads), by "
    "outcome: 'found' or 'absent'.",
    ["outcome"],
    registry=REGISTRY,
)
EXPIRED_KEYS = Counter(
    "taskstate_expired_keys",
    "Keys that expired (their time to live ran out) and were deleted, by component: at the "
    "first Open of a batch, as a write of that batch, or by a sweep of idle tasks.",
    ["component"],
    registry=REGISTRY,
)
READ_KEYS = Counter(
    "taskstate_read_keys",
    "Keys sent by Read (claim-free reads: taskstate show/export and the data source), by kind: "
    "'whole' (every key), 'keys' (a key filter pushed down) or 'changes' (changesSinceBatch).",
    ["kind"],
    registry=REGISTRY,
)
SEEDS = Counter(
    "taskstate_seeds",
    "Writes of the data source ended, by outcome: 'committed', 'aborted', 'refused' (a "
    "duplicate key), 'settled' (abandoned, then finished or undone by a later call).",
    ["outcome"],
    registry=REGISTRY,
)
SEED_KEYS = Counter(
    "taskstate_seed_keys",
    "Keys staged by writes of the data source (visible once their write is committed).",
    registry=REGISTRY,
)
RESTORE_PROGRESS = Gauge(
    "taskstate_restore_progress_keys",
    "A running restore's keys: kind 'restored' (sent so far) and 'expected' (the state's "
    "size; set once the restore has run a few seconds). Removed when the restore ends.",
    ["task", "kind"],
    registry=REGISTRY,
)
RESTORE_SECONDS = Histogram(
    "taskstate_restore_seconds",
    "Time to stream one task's state to a worker.",
    buckets=_LATENCY,
    registry=REGISTRY,
)
FLUSHES = Counter(
    "taskstate_flushes",
    "Flushes of deferred group commits asked for by the executor plugin, by outcome "
    "(failed: the plugin stopped the executor before the task could be reported done).",
    ["outcome"],
    registry=REGISTRY,
)
FLUSH_SECONDS = Histogram(
    "taskstate_flush_seconds",
    "Time of one flush: the FLUSH order to every worker holding the attempt's changes, "
    "their commits, and their answers.",
    buckets=_LATENCY,
    registry=REGISTRY,
)
DEFERRED_ATTEMPTS = Gauge(
    "taskstate_deferred_attempts",
    "Task attempts whose group changes are held in Python workers, waiting for the flush.",
    registry=REGISTRY,
)
UNMARKED_BATCHES = Counter(
    "taskstate_unmarked_batches",
    "Task attempts reported done without their batch marked finished: Redis did not answer "
    "the mark within the flush timeout (their changes were durable).",
    registry=REGISTRY,
)
WORKERS_REATTACHED = Counter(
    "taskstate_workers_reattached",
    "Python workers that attached again with held group changes (after a sidecar restart "
    "or a broken Attach stream), so that their flush went on.",
    registry=REGISTRY,
)
REDIS_WAIT_SECONDS = Counter(
    "taskstate_redis_wait_seconds",
    "Time Redis calls spent waiting for Redis (calls that were retried or never answered), "
    "from their start to their success or their deadline, by operation.",
    ["op"],
    registry=REGISTRY,
)
REDIS_OUTAGES_RIDDEN = Counter(
    "taskstate_redis_outages_ridden",
    "Redis calls that failed, waited and then succeeded within their deadline, by operation.",
    ["op"],
    registry=REGISTRY,
)
REDIS_RETRIES = Counter(
    "taskstate_redis_retries",
    "Redis calls retried after an error that is safe to retry, by operation.",
    ["op"],
    registry=REGISTRY,
)
REDIS_ERRORS = Counter(
    "taskstate_redis_errors",
    "Redis errors seen (retried or not), by operation and error class. A script's refusal "
    "(a fenced commit, a state ahead) is not one: taskstate_requests counts those by code.",
    ["op", "error"],
    registry=REGISTRY,
)
REDIS_REDIRECTS = Counter(
    "taskstate_redis_redirects",
    "Redis Cluster redirections followed (MOVED or ASK).",
    ["kind"],
    registry=REGISTRY,
)
REDIS_UP = Gauge(
    "taskstate_redis_up",
    "1 while Redis (every primary of a cluster) answers the health ping, else 0.",
    registry=REGISTRY,
)


def serve(port: int, host: str = "0.0.0.0") -> Any:  # noqa: S104 - scraped from the pod IP
    """Serve /metrics on `host:port`; returns the server (its `server_port` is the port)."""
    server, _thread = start_http_server(port, addr=host, registry=REGISTRY)
    log.info("metrics served", extra={"address": f"http://{host}:{server.server_port}/metrics"})
    return server
