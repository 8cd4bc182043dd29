"""A sidecar that asks for a token and answers on its frame lane alone."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from taskstate.testing import RedisServer, SidecarProcess

TOKEN = "token-for-the-lane-" + "t" * 24


@contextmanager
def lane_with_tokens(redis: RedisServer, folder: Path, namespace: str) -> Iterator[SidecarProcess]:
    """A sidecar granting TOKEN `namespace` only, whose gRPC socket is moved away."""
    tokens = folder / "tokens.json"
    tokens.write_text(json.dumps(
        {"tokens": [{"name": "job", "token": TOKEN, "namespaces": [namespace]}]}
    ))  # fmt: skip
    side = SidecarProcess(
        redis.url, folder / "s.sock", extra=["--tokens-file", str(tokens)]
    ).start()
    os.rename(folder / "s.sock", folder / "moved.sock")  # the lane alone answers
    try:
        yield side
    finally:
        side.kill()
