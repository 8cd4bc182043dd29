"""The Lua scripts of the task protocol (redis/lua/), each knowing its SHA-1.

Every script starts with lua/prelude.lua (helpers shared by the scripts). Redis names a
loaded script by the SHA-1 of its source; a restarted or failed-over server has an empty
script cache, so callers load on NOSCRIPT (see routing.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

NAMES = (
    "open",
    "commit",
    "get",
    "import",
    "changes",
    "rescale_lock",
    "rescale_commit",
    "rescale_retire",
    "edit",
)


@dataclass(frozen=True, slots=True)
class Script:
    """One script: its name, its source and the SHA-1 Redis knows it by."""

    name: str
    source: str
    sha: str

    @classmethod
    def load(cls, name: str) -> Script:
        """Read `lua/<name>.lua` from the package, after the shared `lua/prelude.lua`."""
        lua = resources.files(__package__).joinpath("lua")
        source = lua.joinpath("prelude.lua").read_text() + lua.joinpath(f"{name}.lua").read_text()
        sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
        return cls(name, source, sha)


def load_all() -> dict[str, Script]:
    """Every script of the protocol, by name."""
    return {n: Script.load(n) for n in NAMES}
