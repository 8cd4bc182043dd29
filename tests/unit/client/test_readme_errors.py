"""Every public error a task or an operator's tool can get is in the README's table."""

from __future__ import annotations

import taskstate.client as client
from taskstate.client import TaskStateError
from tests.readme import README, error_table


def public_errors() -> dict[str, str]:
    out = {}
    for name in client.__all__:
        obj = getattr(client, name)
        if isinstance(obj, type) and issubclass(obj, TaskStateError) and obj is not TaskStateError:
            out[name] = obj.code
    return out


def test_the_readme_table_has_every_public_error_class_with_its_code() -> None:
    errors = public_errors()
    assert len(errors) >= 17, errors  # the table below is not read empty
    assert error_table() == errors


def test_a_class_missing_from_the_table_is_seen() -> None:
    text = README.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `UnauthenticatedError`"))
    assert "UnauthenticatedError" not in error_table(text.replace(row + "\n", ""))
