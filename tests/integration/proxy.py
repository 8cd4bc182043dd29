"""A TCP -> Unix-socket proxy in front of Redis that can lose one reply on purpose.

`arm()` makes the next request containing a marker (EVALSHA by default) reach Redis,
then throws Redis' reply away and cuts the connection: the client cannot know whether
the command ran. That is the ambiguous failure a retried commit must survive.
"""

from __future__ import annotations

import socket
import threading


class LossyProxy:
    def __init__(self, unix_path: str) -> None:
        self.unix_path = unix_path
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._armed: bytes | None = None
        self._lock = threading.Lock()
        self.replies_lost = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, marker: bytes = b"EVALSHA") -> None:
        with self._lock:
            self._armed = marker

    def close(self) -> None:
        self._stop = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.unix_path)
            except OSError:  # Redis is down: refuse this client as Redis would, serve on
                _close(upstream)
                _close(client)
                continue
            doomed = threading.Event()
            threading.Thread(target=self._up, args=(client, upstream, doomed), daemon=True).start()
            threading.Thread(
                target=self._down, args=(upstream, client, doomed), daemon=True
            ).start()

    def _up(self, src: socket.socket, dst: socket.socket, doomed: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    if self._armed is not None and self._armed in data:
                        self._armed = None
                        doomed.set()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(dst)

    def _down(self, src: socket.socket, dst: socket.socket, doomed: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                if doomed.is_set():  # Redis answered: lose the answer, cut the line
                    with self._lock:
                        self.replies_lost += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(dst)
            _close(src)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
