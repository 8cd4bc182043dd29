"""Tokens: who may touch which namespaces' state.

`--tokens-file FILE` (or `$TASKSTATE_TOKENS`, the same JSON) turns them on:

    {"tokens": [
      {"name": "hashtags-job", "token": "…at least 16 characters…", "namespaces": ["hashtags"]},
      {"name": "operators", "token": "…", "namespaces": ["*"]}
    ]}

Every call must then carry `authorization: Bearer <token>`. A token opens, restores,
commits, reads, lists, exports, imports and drops only its namespaces (`*`: all). Listing
the namespaces shows only the ones a token may see. `Doctor` needs a valid token. Health
and reflection stay open: they reveal nothing about state.

Tokens are kept as SHA-256 digests, compared by digest, and never logged. Logs name the
token's `name`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from taskstate.proto import codes, ids

from .errors import SidecarError

log = logging.getLogger("taskstate.sidecar.auth")

MIN_TOKEN_CHARS = 16
ALL = "*"


class TokenConfigError(ValueError):
    """An unusable tokens file (the sidecar refuses to start)."""


@dataclass(frozen=True, slots=True)
class Grant:
    """What one token may do."""

    name: str
    namespaces: frozenset[str]

    def allows(self, namespace: str) -> bool:
        """Whether this token may touch `namespace`."""
        return ALL in self.namespaces or namespace in self.namespaces


class Authorizer:
    """Checks each call's token against the namespaces it touches."""

    def __init__(self, grants: dict[bytes, Grant]) -> None:
        self._grants = grants

    @classmethod
    def load(cls, path: str | None, env_value: str | None) -> Authorizer | None:
        """From the file (wins) or the environment's JSON; None when neither is given."""
        if path:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise TokenConfigError(f"--tokens-file {path}: {exc}") from None
            where = f"--tokens-file {path}"
        elif env_value:
            text, where = env_value, "$TASKSTATE_TOKENS"
        else:
            return None
        return cls(_parse(text, where))

    def grant(self, token: str | None) -> Grant:
        """The caller's grant; UNAUTHENTICATED without a known token."""
        if not token:
            raise SidecarError(
                codes.UNAUTHENTICATED,
                "this sidecar requires a token and the call carried none. Set "
                "TASKSTATE_TOKEN_FILE (or TASKSTATE_TOKEN) for the job or the CLI.",
            )
        found = self._grants.get(hashlib.sha256(token.encode()).digest())
        if found is None:
            raise SidecarError(
                codes.UNAUTHENTICATED,
                "the call's token is not one this sidecar knows (revoked, or for another "
                "sidecar). Check TASKSTATE_TOKEN_FILE against the sidecar's --tokens-file.",
            )
        return found

    def check(self, token: str | None, namespace: str | None, what: str) -> Grant:
        """Refuse unless the token may touch `namespace` (None: any valid token will do)."""
        g = self.grant(token)
        if namespace is not None and not g.allows(namespace):
            log.warning(
                "call refused: namespace not granted",
                extra={"token_name": g.name, "method": what, "namespace": namespace},
            )
            raise SidecarError(
                codes.PERMISSION_DENIED,
                f"namespace {namespace!r}: token {g.name!r} may not {what} it (it is granted "
                f"{', '.join(sorted(g.namespaces))}). Nothing was read or written. Operator "
                "action: use this job's own token, or grant the namespace in --tokens-file.",
            )
        return g


def _parse(text: str, where: str) -> dict[bytes, Grant]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenConfigError(f"{where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    entries = doc.get("tokens") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise TokenConfigError(
            f'{where}: expected {{"tokens": [{{"name", "token", "namespaces"}}, ...]}}'
        )
    grants: dict[bytes, Grant] = {}
    for i, e in enumerate(entries):
        at = f"{where}: tokens[{i}]"
        if not isinstance(e, dict):
            raise TokenConfigError(f"{at}: expected an object")
        name, token, spaces = e.get("name"), e.get("token"), e.get("namespaces")
        if not isinstance(name, str) or not name:
            raise TokenConfigError(f"{at}: needs a 'name' (shown in logs instead of the token)")
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
            raise TokenConfigError(
                f"{at} ({name}): 'token' must be a string of at least {MIN_TOKEN_CHARS} "
                "characters (e.g. `openssl rand -hex 32`)"
            )
        if (
            not isinstance(spaces, list)
            or not spaces
            or not all(isinstance(n, str) for n in spaces)
        ):
            raise TokenConfigError(f"{at} ({name}): 'namespaces' must be a non-empty list")
        for n in spaces:
            problem = None if n == ALL else ids.name_problem("namespace", n)
            if problem:
                raise TokenConfigError(f"{at} ({name}): {problem}")
        digest = hashlib.sha256(token.encode()).digest()
        if digest in grants:
            raise TokenConfigError(f"{at} ({name}): the same token appears twice")
        grants[digest] = Grant(name, frozenset(spaces))
    return grants


def visible(grant: Grant | None, namespaces: Iterable[str]) -> list[str]:
    """The namespaces a caller may see (all when tokens are off)."""
    return [n for n in namespaces if grant is None or grant.allows(n)]
