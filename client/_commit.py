"""Sending a change set: the Commit RPCs of one block's (or one flush's) changes.

A `Committer` holds what a commit of one task needs (the transport, the settings, the
task's names, the batch) as plain values, never a TaskState: the flush of deferred group
changes (`_buffer.py`) keeps it after the blocks that made the changes are gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from taskstate.proto import taskstate_pb2 as pb

from ._config import TaskStateConfig
from ._errors import LimitError
from ._session import Session
from ._transport import Transport
from ._wire import ENTRY_OVERHEAD, REQUEST_HEADROOM, pieces


class Sender(Protocol):
    """What sends a task's change sets (a Committer; tests give their own)."""

    def send(
        self,
        session: Session,
        upserts: list[tuple[str, bytes]],
        deletes: list[str],
        position: bytes | None = None,
    ) -> None:
        """Commit the change set under the session's epoch."""
        ...

    def requests(
        self, session: Session, upserts: list[tuple[str, bytes]], deletes: list[str]
    ) -> list[pb.CommitRequest]:
        """The Commit requests `send` would make of the change set (to hand it over)."""
        ...


@dataclass(frozen=True, slots=True)
class Committer:
    """Commits change sets of one task in one batch (or batch job)."""

    transport: Transport
    config: TaskStateConfig
    task_id: str
    task: pb.TaskId
    writer: pb.Writer
    batch: int | None

    def send(
        self,
        session: Session,
        upserts: list[tuple[str, bytes]],
        deletes: list[str],
        position: bytes | None = None,
    ) -> None:
        """Commit `upserts` and `deletes` under the session's epoch; keep its version current.

        In a micro-batch a large change set goes in several pieces (a replay of the batch
        rolls back every commit of that batch); in a batch job it must fit one message.
        """
        c = self.config
        task_id = self.task_id
        parts = self._pieces(upserts, deletes)
        if len(parts) > 1 and self.batch is None:
            total = sum(len(k) + len(v) + ENTRY_OVERHEAD for k, v in upserts)
            raise LimitError(
                f"task {task_id}: this commit is {total} bytes, over the message limit of "
                f"{c.max_message_bytes} bytes (TASKSTATE_MAX_MESSAGE_BYTES). Nothing was "
                "sent. Commit more often with s.commit(position=...), or raise "
                "TASKSTATE_MAX_MESSAGE_BYTES and the sidecar's --max-message-bytes together.",
                task_id,
            )
        try:
            for i, piece in enumerate(parts):
                last = i == len(parts) - 1
                req = self.request(session.epoch, piece)
                if position is not None and last:
                    req.position = position
                    req.has_position = True
                r = self.transport.commit(req, task_id)
                # Another process serving this attempt may have committed since this one
                # last knew the version: then the cached data lacks its changes, and must
                # not pass for the new version (the next Open restores instead).
                stale = r.base_version and r.base_version != session.version
                session.version = "" if stale or not session.version else r.version
        except BaseException:
            session.data = None  # what Redis holds is no longer known here: restore next time
            raise

    def requests(
        self, session: Session, upserts: list[tuple[str, bytes]], deletes: list[str]
    ) -> list[pb.CommitRequest]:
        """The Commit requests `send` would make of a micro-batch's change set."""
        return [self.request(session.epoch, p) for p in self._pieces(upserts, deletes)]

    def _pieces(self, upserts: list[tuple[str, bytes]], deletes: list[str]) -> list[Any]:
        budget = self.config.max_message_bytes - REQUEST_HEADROOM
        return pieces(self.task_id, upserts, deletes, budget)

    def request(self, epoch: int, piece: dict[str, Any]) -> pb.CommitRequest:
        """The CommitRequest of one piece of a change set (`pieces`), under `epoch`."""
        durability, replicas = self.config.durability.to_wire()
        req = pb.CommitRequest(
            task=self.task,
            epoch=epoch,
            durability=durability,
            replicas=replicas,
            writer=self.writer,
            **piece,
        )
        if self.batch is not None:
            req.batch = self.batch
        return req

    def whole(self, upserts: list[tuple[str, bytes]]) -> pb.CommitRequest | None:
        """The upserts as one CommitRequest without its epoch (None: over one message).

        For OpenCommit: a block that only wrote, committed with the Open that gives its
        epoch.
        """
        budget = self.config.max_message_bytes - REQUEST_HEADROOM
        parts = pieces(self.task_id, upserts, [], budget)
        return self.request(0, parts[0]) if len(parts) == 1 else None
