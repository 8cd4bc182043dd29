"""The executor plugin's end of the flush barrier: `FLUSH N` / `DISCARD N` lines.

A line protocol on an owner-only Unix socket beside the gRPC one, so that the plugin
(FlushBarrier.java) needs nothing but the JDK. What a FLUSH does is flush.py's.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from .flush import FlushCoordinator


class BarrierServer:
    """The plugin's end: `FLUSH N` / `DISCARD N` lines on an owner-only Unix socket."""

    def __init__(self, coordinator: FlushCoordinator, path: Path) -> None:
        self.coordinator = coordinator
        self.path = path
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Listen (replacing a stale socket file from an earlier sidecar)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        finally:
            os.umask(old)

    async def stop(self) -> None:
        """Stop listening and remove the socket file (the journal stays for a successor)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write((await self._answer(line.decode(errors="replace").split())).encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(self, words: list[str]) -> str:
        if len(words) != 2 or words[0] not in ("FLUSH", "DISCARD") or not _is_int(words[1]):
            return "ERR expected FLUSH <task attempt id> or DISCARD <task attempt id>\n"
        attempt = int(words[1])
        if words[0] == "DISCARD":
            self.coordinator.discard(attempt)
            return "OK 0\n"
        ok, why, keys = await self.coordinator.flush(attempt)
        return f"OK {keys}\n" if ok else f"FAIL {' '.join(why.split())}\n"


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
