"""Spark's sessionization example: one group call, the session in TaskState or GroupState.

Sessions per word: a session starts with a word's first event and closes when the word
has been silent for GAP_MS of event time (an event-time timeout). With the session in
TaskState, GroupState keeps only what Spark needs to keep and fire the timer: a one-field
marker and the timeout. Used by the e2e job that runs the pattern under faults
(tests/e2e/jobs/sessions.py) and by the benchmark that times it against GroupState
(benchmarks/figures/sessions.py); docs/how-to/spark-apis.md, "With timeouts", shows it.
"""

from __future__ import annotations

from typing import Any

GAP_MS = 5_000  # a session closes after this much event time without its word

Session = tuple[int, int, int]  # start, last, count (event-time ms, ms, events)


def updated(old: Session | None, stamps: list[int]) -> Session:
    """(start, last, count) after events at `stamps` (ms)."""
    start, last, count = old if old is not None else (min(stamps), min(stamps), 0)
    return start, max(last, max(stamps)), count + len(stamps)


def session_call(word: str, stamps: list[int], gs: Any, state: Any = None) -> tuple[Session, bool]:
    """One group call: (the session, whether it closed).

    `state`: an open TaskState block holding the sessions, or None to keep the session
    in GroupState `gs`. A timed-out group's session is closed (and forgotten); any other
    call folds `stamps` into the word's session and sets its timeout.
    """
    closed = bool(gs.hasTimedOut)
    if state is None:
        if closed:
            session = tuple(gs.get)
            gs.remove()
        else:
            session = updated(gs.getOption, stamps)
            gs.update(session)
    elif closed:
        session = tuple(state.pop(word))
        gs.remove()
    else:
        old = state.get(word)
        session = updated(None if old is None else tuple(old), stamps)
        state[word] = list(session)
        gs.update((True,))  # Spark keeps timers only for keys with a GroupState
    if not closed:
        gs.setTimeoutTimestamp(max(session[1] + GAP_MS, gs.getCurrentWatermarkMs() + 1))
    return session, closed
