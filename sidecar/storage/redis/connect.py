"""From `--redis-url` (and secrets kept off the command line) to a redis-py client.

Forms (all through one URL):

- standalone  `redis://[user:password@]host[:port]/db`, `rediss://…` (TLS), `unix:///path?db=N`
- Sentinel    `redis+sentinel://[user:password@]host[:port][,host[:port]…]/master-name[/db]`
              (`rediss+sentinel://` for TLS to the sentinels and the master)
- Cluster     `redis+cluster://[user:password@]host[:port][,host[:port]…]`
              (`rediss+cluster://` for TLS)

A port left out is Redis' default: 6379, and 26379 for a sentinel.

The password may also come from a file (`--redis-password-file`) or the environment
(`TASKSTATE_REDIS_PASSWORD`); either wins over the URL. `redact()` is the only form of a
URL that may reach a log line or an error message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelManagedSSLConnection
from redis.backoff import NoBackoff

try:
    import hiredis
except ImportError:  # pragma: no cover - hiredis is a dependency; stay correct without it
    hiredis = None  # type: ignore[assignment]

Kind = Literal["standalone", "sentinel", "cluster"]

_SCHEMES: dict[str, tuple[Kind, bool]] = {
    "redis": ("standalone", False),
    "rediss": ("standalone", True),
    "unix": ("standalone", False),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
_HOSTPORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?$")
_DEFAULT_PORT = {"standalone": 6379, "sentinel": 26379, "cluster": 6379}


class RedisUrlError(ValueError):
    """A `--redis-url` (or its companion options) that cannot be used; says why."""


@dataclass(frozen=True)
class TlsFiles:
    """Client-side TLS material for `rediss…` URLs."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    check_hostname: bool = True


@dataclass(frozen=True)
class RedisSettings:
    """Where Redis is and how to log in. `password` never appears in `repr`."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)
    tls: TlsFiles = field(default_factory=TlsFiles)

    def __repr__(self) -> str:
        return f"RedisSettings(url={redact(self.url)!r}, username={self.username!r})"

    @classmethod
    def build(
        cls,
        url: str,
        *,
        username: str | None = None,
        password_file: str | None = None,
        password_env: str | None = None,
        sentinel_password_file: str | None = None,
        sentinel_password_env: str | None = None,
        tls: TlsFiles | None = None,
    ) -> RedisSettings:
        """Combine the URL with secrets from files or the environment (those win)."""
        password = None
        if password_file:
            password = _read_secret(password_file, "--redis-password-file")
        elif password_env:
            password = password_env
        sentinel_password = None
        if sentinel_password_file:
            sentinel_password = _read_secret(sentinel_password_file, "--sentinel-password-file")
        elif sentinel_password_env:
            sentinel_password = sentinel_password_env
        settings = cls(
            url=url,
            username=username or None,
            password=password,
            sentinel_password=sentinel_password,
            tls=tls or TlsFiles(),
        )
        parse(settings.url)  # refuse a bad URL now, at start, with the reason
        for name, path in (("CA", settings.tls.ca), ("certificate", settings.tls.cert)):
            if path and not Path(path).is_file():
                raise RedisUrlError(f"the TLS {name} file {path!r} does not exist")
        if settings.tls.key and not Path(settings.tls.key).is_file():
            raise RedisUrlError(f"the TLS key file {settings.tls.key!r} does not exist")
        return settings

    def with_url(self, url: str) -> RedisSettings:
        """The same secrets and TLS files, another URL."""
        return replace(self, url=url)


def _read_secret(path: str, option: str) -> str:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise RedisUrlError(f"{option} {path!r}: cannot read it ({exc.strerror})") from None
    secret = text.strip("\r\n")
    if not secret:
        raise RedisUrlError(f"{option} {path!r} is empty")
    return secret


@dataclass(frozen=True)
class ParsedUrl:
    """The parts of a Redis URL that decide how to connect."""

    kind: Kind
    tls: bool
    hosts: tuple[tuple[str, int], ...]
    master: str | None
    db: int
    username: str | None
    password: str | None = field(repr=False)
    query: dict[str, str]


def redact(url: str) -> str:
    """The URL with any password replaced by `***` (safe to log)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<not a URL>"
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        creds, _, hosts = netloc.rpartition("@")
        user, colon, _pw = creds.partition(":")
        netloc = f"{user}:***@{hosts}" if colon else f"{user}@{hosts}"
    path_part, q, query = path.partition("?")
    if q:
        pairs = []
        for item in query.split("&"):
            k, eq, v = item.partition("=")
            pairs.append(f"{k}=***" if "password" in k.lower() and eq else item)
        query = "&".join(pairs)
    return f"{scheme}://{netloc}{slash}{path_part}{q}{query}"


def parse(url: str) -> ParsedUrl:
    """Validate and split a Redis URL; RedisUrlError names what is wrong."""
    shown = redact(url)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _SCHEMES:
        raise RedisUrlError(
            f"--redis-url {shown!r}: unknown scheme {scheme!r}; use one of "
            + ", ".join(f"{s}://" for s in _SCHEMES)
        )
    kind, tls = _SCHEMES[scheme]
    if scheme == "unix":
        parts = urlsplit(url)
        if not parts.path.startswith("/"):
            raise RedisUrlError(f"--redis-url {shown!r}: use unix:///absolute/path.sock?db=N")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return ParsedUrl(kind, False, (), None, _db(query.get("db", "0"), shown), None, None, query)
    rest = url.split("://", 1)[1]
    netloc, _, tail = rest.partition("/")
    path, _, raw_query = tail.partition("?")
    query = {k: v[-1] for k, v in parse_qs(raw_query).items()}
    username = password = None
    if "@" in netloc:
        creds, _, netloc = netloc.rpartition("@")
        user, colon, pw = creds.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
    hosts = []
    for hp in netloc.split(","):
        m = _HOSTPORT.match(hp.strip())
        if not m:
            raise RedisUrlError(
                f"--redis-url {shown!r}: {hp!r} is not HOST[:PORT] (an IPv6 address goes in "
                "brackets: [::1]:6379)"
            )
        host = m.group(1).strip("[]")
        port = int(m.group(2)) if m.group(2) else _DEFAULT_PORT[kind]
        if not 0 < port < 65536:
            raise RedisUrlError(f"--redis-url {shown!r}: port {port} is out of range")
        hosts.append((host, port))
    segments = [s for s in path.split("/") if s]
    master = None
    db = 0
    if kind == "standalone":
        if len(hosts) != 1:
            raise RedisUrlError(
                f"--redis-url {shown!r}: a standalone URL names one host; for several use "
                "redis+sentinel:// or redis+cluster://"
            )
        if len(segments) > 1:
            raise RedisUrlError(f"--redis-url {shown!r}: the path is only the db number")
        db = _db(segments[0] if segments else "0", shown)
    elif kind == "sentinel":
        if not segments or len(segments) > 2:
            raise RedisUrlError(
                f"--redis-url {shown!r}: name the master, "
                "redis+sentinel://host:port[,host:port]/MASTER-NAME[/DB]"
            )
        master = unquote(segments[0])
        db = _db(segments[1] if len(segments) == 2 else "0", shown)
    else:
        if segments:
            raise RedisUrlError(
                f"--redis-url {shown!r}: a cluster has only db 0 and takes no path; "
                "use redis+cluster://host:port[,host:port…]"
            )
    return ParsedUrl(kind, tls, tuple(hosts), master, db, username, password, query)


def _db(text: str, shown: str) -> int:
    if not text.isdigit():
        raise RedisUrlError(f"--redis-url {shown!r}: db {text!r} is not a number")
    return int(text)


def _common_kwargs(
    settings: RedisSettings, parsed: ParsedUrl, socket_timeout_s: float
) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": min(5.0, socket_timeout_s),
        # redis-py's own retries are off: the sidecar's RetryPolicy is the only layer.
        "retry": Retry(NoBackoff(), 0),
    }
    username = settings.username or parsed.username
    password = settings.password if settings.password is not None else parsed.password
    if username:
        kw["username"] = username
    if password is not None:
        kw["password"] = password
    if parsed.tls:
        kw["ssl_check_hostname"] = settings.tls.check_hostname
        kw["ssl_cert_reqs"] = "required"
        if settings.tls.ca:
            kw["ssl_ca_certs"] = settings.tls.ca
        if settings.tls.cert:
            kw["ssl_certfile"] = settings.tls.cert
        if settings.tls.key:
            kw["ssl_keyfile"] = settings.tls.key
    return kw


# an argument this large is sent as it is, beside the command's other bytes, not copied
LARGE_ARG = 1 << 16


def _hiredis_pack_command(self: Any, *args: Any) -> list[bytes]:
    """Connection.pack_command with hiredis' C packer, large arguments not copied.

    redis-py's asyncio connections pack in Python, which costs more than Redis itself for
    a 10,000-field commit (about 4 µs per argument against 0.1 µs). hiredis copies every
    argument into one buffer, growing it as it goes: a commit's packed change set of 1.3 MB
    took 1.9 ms to pack so, more than the rest of the sidecar's work on it. A command
    with a large argument and few others (a commit) is cut into pieces instead: the
    small parts packed together, each large argument its own piece (as redis-py does).
    """
    if isinstance(args[0], str) and " " in args[0]:  # e.g. "CONFIG GET"
        args = (*args[0].split(), *args[1:])
    return pack(args)


def pack(args: tuple[Any, ...]) -> list[bytes]:
    """A command as RESP, in pieces (see `_hiredis_pack_command`)."""
    if len(args) <= 64 and any(a.__class__ is bytes and len(a) >= LARGE_ARG for a in args):
        return resp_pieces(args)
    return [hiredis.pack_command(args)]


def resp_pieces(args: tuple[Any, ...]) -> list[bytes]:
    """The command as RESP, in pieces: each large bytes argument alone, uncopied.

    The pieces joined are exactly `hiredis.pack_command(args)` (str as UTF-8, int as its
    digits); any other argument type goes to hiredis whole.
    """
    pieces: list[bytes] = []
    head = bytearray(b"*%d\r\n" % len(args))
    for a in args:
        cls = a.__class__
        if cls is str:
            a = a.encode()
        elif cls is int:
            a = b"%d" % a
        elif cls is not bytes:
            return [hiredis.pack_command(args)]
        head += b"$%d\r\n" % len(a)
        if len(a) >= LARGE_ARG:
            pieces.append(bytes(head))
            pieces.append(a)
            head = bytearray(b"\r\n")
        else:
            head += a
            head += b"\r\n"
    pieces.append(bytes(head))
    return pieces


_fast_classes: dict[type, type] = {}


def _fast(cls: type) -> type:
    """A subclass of connection class `cls` that packs with hiredis (`cls` without it)."""
    if hiredis is None or cls in _fast_classes.values():
        return cls
    if cls not in _fast_classes:
        body = {"pack_command": _hiredis_pack_command, "__doc__": _hiredis_pack_command.__doc__}
        _fast_classes[cls] = type(f"Hiredis{cls.__name__}", (cls,), body)
    return _fast_classes[cls]


def _use_fast_packing(kind: Kind, client: Any) -> Any:
    if kind == "cluster":
        kw = client.nodes_manager.connection_kwargs
        kw["connection_class"] = _fast(kw.get("connection_class", Connection))
    else:
        pool = client.connection_pool
        pool.connection_class = _fast(pool.connection_class)
    return client


def create_client(settings: RedisSettings, *, socket_timeout_s: float) -> tuple[Kind, Any]:
    """A redis.asyncio client for the URL's topology (not connected yet)."""
    kind, client = _create_client(settings, socket_timeout_s=socket_timeout_s)
    return kind, _use_fast_packing(kind, client)


def _create_client(settings: RedisSettings, *, socket_timeout_s: float) -> tuple[Kind, Any]:
    parsed = parse(settings.url)
    kw = _common_kwargs(settings, parsed, socket_timeout_s)
    if parsed.kind == "cluster":
        kw.pop("retry")
        client = RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in parsed.hosts],
            ssl=parsed.tls,
            retry=Retry(NoBackoff(), 0),
            require_full_coverage=False,
            **kw,
        )
        return "cluster", client
    if parsed.kind == "sentinel":
        sentinel_kw: dict[str, Any] = {
            "socket_timeout": kw["socket_timeout"],
            "socket_connect_timeout": kw["socket_connect_timeout"],
        }
        if settings.sentinel_password is not None:
            sentinel_kw["password"] = settings.sentinel_password
        if parsed.tls:
            sentinel_kw["ssl"] = True
            sentinel_kw.update({k: v for k, v in kw.items() if k.startswith("ssl_")})
            kw["connection_class"] = SentinelManagedSSLConnection
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(parsed.hosts), sentinel_kwargs=sentinel_kw, **kw
        )
        assert parsed.master is not None  # noqa: S101 - parse() requires it
        return "sentinel", sentinel.master_for(parsed.master, db=parsed.db)
    url = settings.url
    if parsed.kind == "standalone" and (settings.password is not None or settings.username):
        url = _strip_credentials(url)
    return "standalone", aioredis.from_url(url, health_check_interval=10, **kw)


def _strip_credentials(url: str) -> str:
    scheme, _, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        netloc = netloc.rpartition("@")[2]
    return f"{scheme}://{netloc}{slash}{tail}"
