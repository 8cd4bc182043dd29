"""How a client reaches a sidecar that asks for TLS or a token.

From the environment only (never code or command lines, which end up in logs and
process listings):

- `TASKSTATE_SIDECAR_TLS_CA`: CA bundle that signed the sidecar's certificate (TCP
  listeners need TLS); `TASKSTATE_SIDECAR_TLS_CERT` / `_KEY`: a client certificate for
  mutual TLS; `TASKSTATE_SIDECAR_TLS_SERVER_NAME`: the name to check in the certificate
  when it differs from the host dialled.
- `TASKSTATE_TOKEN_FILE` (a file holding the token) or `TASKSTATE_TOKEN`: sent as
  `authorization: Bearer …` on every call when the sidecar was started with tokens.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from ._errors import ConfigError
from ._settings import TLS_CA, TLS_CERT, TLS_KEY, TLS_SERVER_NAME, TOKEN, TOKEN_FILE


@dataclass(frozen=True, slots=True)
class SidecarSecurity:
    """TLS files and the token for the sidecar; the token never appears in repr."""

    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    server_name: str | None = None
    token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, token_file: str | None = None
    ) -> SidecarSecurity:
        """Read the settings above (a token file wins over the token variable)."""
        env = os.environ if env is None else env
        token = None
        path = token_file or env.get(TOKEN_FILE.env)
        if path:
            try:
                token = Path(path).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"{TOKEN_FILE.env}={path}: cannot read the token: {exc}"
                ) from None
            if not token:
                raise ConfigError(f"{TOKEN_FILE.env}={path}: the file is empty")
        elif env.get(TOKEN.env):
            token = env[TOKEN.env].strip()
        cert, key = env.get(TLS_CERT.env) or None, env.get(TLS_KEY.env) or None
        if bool(cert) != bool(key):
            raise ConfigError(f"{TLS_CERT.env} and {TLS_KEY.env} go together (mutual TLS)")
        return cls(
            tls_ca=env.get(TLS_CA.env) or None,
            tls_cert=cert,
            tls_key=key,
            server_name=env.get(TLS_SERVER_NAME.env) or None,
            token=token,
        )

    @property
    def tls(self) -> bool:
        """Whether to dial the sidecar with TLS."""
        return bool(self.tls_ca or self.tls_cert)

    def channel(self, target: str, options: list[tuple[str, Any]]) -> grpc.Channel:
        """A channel to `target` with these settings."""
        if self.tls:
            if target.startswith("unix:"):
                raise ConfigError(
                    f"{TLS_CA.env} is set but the sidecar is a Unix socket ({target}): TLS is "
                    "for TCP listeners; unset it or dial the sidecar's TCP address."
                )
            try:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=_read(self.tls_ca, TLS_CA.env),
                    private_key=_read(self.tls_key, TLS_KEY.env),
                    certificate_chain=_read(self.tls_cert, TLS_CERT.env),
                )
            except OSError as exc:
                raise ConfigError(f"cannot read a TLS file for the sidecar: {exc}") from None
            if self.server_name:
                options = [*options, ("grpc.ssl_target_name_override", self.server_name)]
            channel = grpc.secure_channel(target, creds, options=options)
        else:
            channel = grpc.insecure_channel(target, options=options)
        if self.token:
            channel = grpc.intercept_channel(channel, _TokenInterceptor(self.token))
        return channel


def _read(path: str | None, name: str) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"{name}={path}: {exc.strerror or exc}") from None


class _CallDetails(
    collections.namedtuple(
        "_CallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    pass


class _TokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[type-arg]
):
    """Adds `authorization: Bearer <token>` to every call."""

    def __init__(self, token: str) -> None:
        self._md = ("authorization", f"Bearer {token}")

    def _with_token(self, d: Any) -> _CallDetails:
        return _CallDetails(
            d.method, d.timeout, [*(d.metadata or ()), self._md], d.credentials,
            d.wait_for_ready, d.compression,
        )  # fmt: skip

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)
