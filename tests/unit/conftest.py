from __future__ import annotations

from collections.abc import Iterator

import pytest

from taskstate.testing import FakeSidecar


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSidecar]:
    with FakeSidecar() as f:
        yield f
