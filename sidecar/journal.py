"""The flush barrier's journal: what a restarted sidecar must know of its predecessor's tasks.

The executor plugin's supervisor replaces a killed sidecar within seconds; the new one
has none of the old one's memory. Before the barrier acknowledges a fact a successor
needs (an attempt's Open of a task at a batch, a worker's deferral), it appends it here,
so that a FLUSH the successor answers is as truthful as the old sidecar's would have been
(sidecar/flush.py; docs/design-notes.md, "A sidecar restart during a task").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from .storage.values import TaskKey

log = logging.getLogger("taskstate.sidecar.flush")


@dataclass
class Inherited:
    """What a predecessor's journal says of the attempts it did not end."""

    # attempt -> the tasks it opened, each at (batch, attempt id SCOPE:N)
    opened: dict[int, dict[TaskKey, tuple[int, str]]] = field(default_factory=dict)
    held: dict[int, set[int]] = field(default_factory=dict)  # attempt -> pids of workers
    unnamed: set[int] = field(default_factory=set)  # held by a worker the record fails to name


def inherited(records: list[list[object]]) -> Inherited:
    """`Journal.open`'s records, read.

    A record that cannot be read is logged and skipped, except a deferral, which always
    counts as held changes.
    """
    out = Inherited()
    for record in records:
        attempt = int(record[1])  # type: ignore[call-overload]
        try:
            if record[0] == "deferred":
                out.held.setdefault(attempt, set()).add(int(record[2]))  # type: ignore[call-overload]
                continue
            ns, comp, part, batch, attempt_id = record[2:]
            task = TaskKey(str(ns), str(comp), int(part))  # type: ignore[call-overload]
            out.opened.setdefault(attempt, {})[task] = (int(batch), str(attempt_id))  # type: ignore[call-overload]
        except (IndexError, ValueError, TypeError):
            if record[0] == "deferred":  # whatever else it says, the attempt held changes
                out.unnamed.add(attempt)
            else:
                log.warning("skipped a malformed Open in the journal", extra={"record": record})
    return out


class Journal:
    """What a restarted sidecar must know of the task attempts its predecessor served.

    One JSON array a line, appended (one write each) before the fact is acknowledged:
    `["opened", attempt, namespace, component, partition, batch, attempt id]`,
    `["deferred", attempt, worker pid]`, `["ended", attempt]` (flushed or discarded). A
    failed flush ends nothing: a FLUSH asked again of a successor fails again. The file
    is rewritten with only the attempts not ended when it is opened and when it outgrows
    both `compact_bytes` and twice what it held after its last rewrite (an attempt whose
    DISCARD never arrived stays live). The executor plugin removes it when its executor
    starts and stops.
    """

    KINDS = ("opened", "deferred", "ended")

    def __init__(self, path: Path, compact_bytes: int = 1 << 20) -> None:
        self.path = path
        self.compact_bytes = compact_bytes
        self._live: dict[int, list[list[object]]] = {}  # attempt -> its records, in order
        self._fd = -1
        self._size = 0  # bytes in the file
        self._kept = 0  # bytes the last rewrite kept

    def open(self) -> list[list[object]]:
        """Read what a predecessor left (records of attempts not ended), then start afresh."""
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        for line in text.splitlines():
            try:
                record = json.loads(line)
                attempt = int(record[1])
                if record[0] not in self.KINDS:
                    raise ValueError(record[0])
            except (ValueError, TypeError, IndexError, KeyError):
                continue  # the line the kill cut short (lines are written whole)
            if record[0] == "ended":
                self._live.pop(attempt, None)
            else:
                self._live.setdefault(attempt, []).append(record)
        self._rewrite()
        return [r for records in self._live.values() for r in records]

    def opened(self, attempt: int, task: TaskKey, batch: int, attempt_id: str) -> None:
        """Attempt `attempt` opened `task` at `batch`."""
        self._append([
            "opened", attempt, task.namespace, task.component, task.partition, batch, attempt_id,
        ])  # fmt: skip

    def deferred(self, attempt: int, pid: int) -> None:
        """Worker `pid` holds changes of `attempt`."""
        self._append(["deferred", attempt, pid])

    def ended(self, attempt: int) -> None:
        """`attempt` was flushed or discarded: a successor need not know it."""
        if self._live.pop(attempt, None) is not None:
            self._append(["ended", attempt])

    def forget_opens(self, attempt: int) -> None:
        """Drop `attempt`'s Opens from the next rewrite (the coordinator's bound forgot them).

        Its workers' deferrals stay: a successor must still fail its FLUSH.
        """
        kept = [r for r in self._live.get(attempt, ()) if r[0] != "opened"]
        if kept:
            self._live[attempt] = kept
        else:
            self._live.pop(attempt, None)

    def close(self) -> None:
        """Close the file (kept: a successor reads it)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _append(self, record: list[object]) -> None:
        if record[0] != "ended":
            self._live.setdefault(int(record[1]), []).append(record)  # type: ignore[call-overload]
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            _write_all(self._fd, line)
        except OSError:
            with contextlib.suppress(OSError):  # no fragment for the next line to join
                os.ftruncate(self._fd, self._size)
            raise
        self._size += len(line)
        if self._size > max(self.compact_bytes, 2 * self._kept):
            self._rewrite()

    def _rewrite(self) -> None:
        text = "".join(
            json.dumps(r, separators=(",", ":")) + "\n" for rs in self._live.values() for r in rs
        ).encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            _write_all(fd, text)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self.close()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        self._size = self._kept = len(text)


def _write_all(fd: int, data: bytes) -> None:
    """All of `data`, or OSError: a short write (a full disk) must not pass for a record."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(f"wrote {n} bytes of {len(view)}")
        view = view[n:]
