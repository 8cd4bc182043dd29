from __future__ import annotations

from collections.abc import Iterator

import pytest

from taskstate.client.admin import AdminClient
from taskstate.testing import FakeSidecar


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeSidecar]:
    with FakeSidecar() as f:
        yield f


@pytest.fixture(autouse=True)
def known_namespace(request: pytest.FixtureRequest) -> None:
    """A test's namespace is known to the store, as a query's is once its batch 0 ran.

    Tests may open at any batch first; a streaming Open past batch 0 in a namespace the
    store has no record of is refused (STATE_LOST), which test_state_lost.py and
    test_namespace_record.py test on namespaces of their own.
    """
    if {"fake", "namespace"} <= set(request.fixturenames):
        f: FakeSidecar = request.getfixturevalue("fake")
        with AdminClient(f.target) as admin:
            admin.adopt(request.getfixturevalue("namespace"))
