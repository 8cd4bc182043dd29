"""Shared fixtures: every test gets its own namespace."""

from __future__ import annotations

import re
import uuid

import pytest


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80]
    return f"t-{name}-{uuid.uuid4().hex[:6]}"
