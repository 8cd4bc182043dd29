"""The task-id grammar: `namespace / component / partition`, and task attempt ids.

namespace and component match `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`; partition is a
non-negative 32-bit integer. A task attempt id is `SCOPE:N`: SCOPE names the Spark
application (or run) and matches the name pattern, N is Spark's task attempt id.
Validation happens on both sides of the wire, so that no value a user passes can make
the sidecar touch keys other than its own task's.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_NAME_RE = re.compile(NAME_PATTERN)
_ATTEMPT_RE = re.compile(NAME_PATTERN + r":-?[0-9]{1,20}")
MAX_PARTITION = 2**31 - 1


def name_problem(kind: str, value: object) -> str | None:
    """Return why `value` is not a valid namespace/component name, or None when it is."""
    if not isinstance(value, str):
        return f"{kind} must be a string, got {type(value).__name__}"
    if not value:
        return f"{kind} is empty"
    if len(value) > 128:
        return f"{kind} {value[:40]!r}... is {len(value)} characters long; the limit is 128"
    if _NAME_RE.fullmatch(value) is None:
        return (
            f"{kind} {value!r} is not allowed: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return None


def partition_problem(value: object) -> str | None:
    """Return why `value` is not a valid partition id, or None when it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"partition must be an integer, got {type(value).__name__}"
    if not 0 <= value <= MAX_PARTITION:
        return f"partition {value} is out of range 0..{MAX_PARTITION}"
    return None


def fq_task_id(namespace: str, component: str, partition: int | str) -> str:
    """The task's fully qualified id, `namespace/component/partition`.

    `partition` may also be a glob (`*`), for a SCAN pattern over a component's tasks.
    """
    return f"{namespace}/{component}/{partition}"


def attempt_problem(value: str) -> str | None:
    """Return why `value` is not a task attempt id (`SCOPE:N`), or None when it is one.

    The empty string is valid: a caller that is no Spark task names no attempt.
    """
    if value and _ATTEMPT_RE.fullmatch(value) is None:
        return (
            f"attempt id {value[:60]!r} is not SCOPE:N (SCOPE: letters, digits, '.', '_', '-', "
            "at most 128; N: the task attempt id)"
        )
    return None


def split_attempt(value: str) -> tuple[str, int] | None:
    """(SCOPE, N) of a task attempt id naming Spark's (non-negative) attempt N, else None.

    As the sidecar's scripts read it (lua/open.lua: `^(.*):(%d+)$`): attempts of one
    application share SCOPE, and N grows with each launch.
    """
    scope, _, n = value.rpartition(":")
    return (scope, int(n)) if scope and n.isdigit() else None


def similar(name: str, names: Iterable[str]) -> list[str]:
    """The names of `names` close enough to `name` to be what was meant (a typo's fix)."""
    return difflib.get_close_matches(name, [n for n in names if n != name], n=3, cutoff=0.75)
