"""Retries towards Redis: a value (what to retry, how long), tenacity underneath.

Only errors after which a repeat cannot apply a change twice are retried. Every script
the sidecar runs is atomic and idempotent for the same arguments (commits carry
absolute values and an epoch; a repeated Open claims again and finds nothing to roll
back), so a connection lost after Redis applied a script is safe to repeat.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import redis.exceptions as rex
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from taskstate.proto import codes

from . import metrics
from .deadline import Deadline
from .errors import SidecarError

T = TypeVar("T")

# what an operator does about a Redis that does not answer (both such errors say it)
_CHECK_REDIS = (
    "Operator action: check that Redis is up and reachable from the sidecar; asking again "
    "is safe (a task's next attempt too): nothing was half-written."
)
log = logging.getLogger("taskstate.sidecar.retry")

# Reply prefixes Redis uses while it is loading, resharding or failing over (for error
# replies redis-py does not map to their own class, e.g. from inside a script).
_TRANSIENT_PREFIXES = ("LOADING", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN")
# redis-py's classes for the same replies (their text has the prefix stripped).
_TRANSIENT_REPLIES = (
    rex.BusyLoadingError,
    rex.TryAgainError,
    rex.ClusterDownError,  # includes MasterDownError
    rex.ReadOnlyError,
    rex.MovedError,  # after a slot moved: the caller refreshed its slot table
    rex.AskError,
)
# Errors that will not go away by asking again: wrong password, missing ACL rights,
# a certificate that does not verify.
_PERMANENT = (rex.AuthenticationError, rex.AuthorizationError, rex.NoPermissionError)


def permanent_cause(exc: BaseException) -> BaseException | None:
    """The configuration problem (credentials, TLS) a connection failure comes from, if any.

    Looked for along the chain of causes: over a Unix socket redis-py raises the
    AuthenticationError of a wrong password as the cause of a ConnectionError, whose own
    text has lost the WRONGPASS prefix.
    """
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, (*_PERMANENT, ssl.SSLCertVerificationError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text or "WRONGPASS" in text or "NOAUTH" in text:
        return exc
    return None


def is_permanent_connection_error(exc: BaseException) -> bool:
    """A connection failure that is a configuration problem (credentials, TLS)."""
    return permanent_cause(exc) is not None


def is_refusal(exc: BaseException) -> bool:
    """A taskstate script's refusal (TSFENCED, TSNEW, ...): an answer, not a Redis error."""
    return isinstance(exc, rex.ResponseError) and str(exc).startswith("TS")


def is_safe_to_retry(exc: BaseException) -> bool:
    """True for errors that say "not now", never for errors that say "no"."""
    if is_permanent_connection_error(exc):
        return False
    if isinstance(exc, _TRANSIENT_REPLIES):
        return True
    if isinstance(exc, rex.ConnectionError | rex.TimeoutError | rex.ClusterError):
        return True
    if isinstance(exc, rex.ResponseError):
        text = str(exc)
        # a script that met a key missing from a slot under migration (see commit.lua)
        return text.startswith(_TRANSIENT_PREFIXES) or "access a non local key" in text
    return False


# How long a Redis call waits for Redis: a failover of up to a minute then costs a task
# two failed attempts at most, within Spark's default spark.task.maxFailures of 4, and the
# call still ends inside the client's 30 s per-call deadline (docs/design-notes.md).
DEFAULT_DEADLINE_S = 25.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter, bounded per sleep and overall by a deadline."""

    deadline_s: float = DEFAULT_DEADLINE_S
    initial_s: float = 0.05
    max_sleep_s: float = 1.0

    async def run(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn`, retrying safe errors until the deadline; then STORAGE_UNAVAILABLE.

        The deadline bounds the whole call, a hung attempt included (a stopped Redis
        keeps its connections open and never answers). The time a call spends waiting for
        Redis (after a failed attempt, or in one that never answers) is counted.
        """
        t0 = time.monotonic()
        retried = False
        try:
            with Deadline(self.deadline_s):
                # the first attempt goes straight (the common case: no retry machinery to
                # build); only a failure that is safe to retry enters the retrying loop
                try:
                    return await fn()
                except Exception as exc:
                    if not is_safe_to_retry(exc):
                        return await self._retried(what, fn, first=exc)
                    _retrying(what, 1, exc)
                retried = True
                result = await self._retried(what, fn)
            metrics.REDIS_OUTAGES_RIDDEN.labels(what).inc()
            return result
        except TimeoutError:
            retried = True
            raise SidecarError(
                codes.STORAGE_UNAVAILABLE,
                f"Redis did not answer {what} within {self.deadline_s:g} s. " + _CHECK_REDIS,
            ) from None
        finally:
            if retried:
                metrics.REDIS_WAIT_SECONDS.labels(what).inc(time.monotonic() - t0)

    async def _retried(
        self, what: str, fn: Callable[[], Awaitable[T]], first: Exception | None = None
    ) -> T:
        """Run `fn` under the retry policy (after a failed first attempt), or map `first`."""

        def _log(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            _retrying(what, state.attempt_number + 1, exc)  # after the first, in run

        try:
            if first is not None:
                raise first
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(is_safe_to_retry),
                stop=stop_after_delay(self.deadline_s),
                wait=wait_random_exponential(multiplier=self.initial_s, max=self.max_sleep_s),
                before_sleep=_log,
                reraise=True,
            ):
                with attempt:
                    return await fn()
        except SidecarError:
            raise
        except Exception as exc:
            if not is_refusal(exc):  # a refusal is the script's answer (a new task, fenced)
                metrics.REDIS_ERRORS.labels(what, type(exc).__name__).inc()
            if isinstance(exc, rex.ResponseError) and str(exc).startswith("WRONGTYPE"):
                raise SidecarError(
                    codes.CORRUPT_STATE,
                    f"a key of this task holds the wrong Redis type during {what} ({exc}): "
                    "it was not written by taskstate. Nothing was changed. Operator action: "
                    "find it with `redis-cli --scan --pattern 'ts:{<task>}:*'` and `TYPE`, "
                    "then repair it or drop the task's state (`taskstate drop ... --yes`).",
                ) from None
            cause = permanent_cause(exc)
            if cause is not None:
                raise SidecarError(
                    codes.STORAGE_UNAVAILABLE,
                    f"Redis refused the sidecar during {what}: {type(cause).__name__}: {cause}. "
                    "Operator action: check the sidecar's Redis user, password and TLS "
                    "settings (--redis-password-file, --redis-tls-*).",
                ) from exc
            if is_safe_to_retry(exc):
                raise SidecarError(
                    codes.STORAGE_UNAVAILABLE,
                    f"Redis did not answer {what} within {self.deadline_s:g} s ({exc}). "
                    + _CHECK_REDIS,
                ) from exc
            raise
        raise AssertionError("unreachable")  # pragma: no cover


def _retrying(what: str, attempt: int, exc: BaseException | None) -> None:
    """Count and log a failed attempt of a Redis call that will be tried again.

    A call's first failure is a warning, its later attempts are debug records (each call
    retries for up to its deadline: a Redis outage made a warning every few hundred
    milliseconds per waiting call); the metrics count every attempt.
    """
    metrics.REDIS_RETRIES.labels(what).inc()
    metrics.REDIS_ERRORS.labels(what, type(exc).__name__).inc()
    log.log(
        logging.WARNING if attempt == 1 else logging.DEBUG,
        "redis call failed, retrying",
        extra={"op": what, "attempt": attempt, "error": repr(exc)},
    )
