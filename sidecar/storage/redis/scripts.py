"""The Lua scripts of the task protocol (lua/), and the one table of their refusals.

Each `Script` knows its source, the SHA-1 Redis names it by, and the order of its ARGV:
callers pass arguments by name (`SCRIPTS["commit"].args(epoch=..., ...)`), so the order
is spelled here once, beside the comment at the top of each .lua file. Every script
starts with lua/prelude.lua (helpers shared by the scripts). A restarted or failed-over
server has an empty script cache, so callers load on NOSCRIPT (routing.py).

A script refuses with an error reply `TS<KIND> <detail>` and writes nothing; `refusal`
turns it into the SidecarError the caller sees (one table for every script).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis.exceptions as rex

from ... import errors
from ...errors import SidecarError

_OPEN = (
    "batch",
    "new_gen",
    "now",
    "writer",
    "codec",
    "attempt",
    "ask_index",
    "seen_gen",
    "seen_ver",
    "partitions",
    "partition",
    "event_time",
    "clock_ms",
)  # fmt: skip

# name -> its ARGV in order; a script whose ARGV goes on (key/value pairs, keys) takes
# the rest after these
ARGV: dict[str, tuple[str, ...]] = {
    "open": _OPEN,
    "commit": ("epoch", "batch", "position", "now", "writer", "log_entry", "upserts", "deletes"),
    # open's, then what commit takes beside them (open_commit.lua)
    "open_commit": (*_OPEN, "position", "log_entry", "upserts", "deletes"),
    "import": ("mode", "epoch", "batch", "position", "codec", "new_gen", "now", "partitions"),
    "changes": ("epoch", "since", "since_gen", "max_keys"),
    "rescale_lock": ("lock", "now"),
    "rescale_commit": ("lock", "partitions", "batch", "prev_batch", "new_gen", "now", "codec"),
    "rescale_retire": ("lock",),
    "edit": ("key", "value", "codec", "now"),
    "read_keys": ("epoch", "at"),
    "sweep": ("now", "idle", "seconds"),
    "read_changes": ("since",),
    "seed_lock": ("lock", "now"),
    "seed_merge": ("lock",),
    "seed_publish": ("lock", "partitions", "batch", "new_gen", "now", "codec", "mode"),
    "seed_undo": ("lock",),
    "done": ("batch", "attempt"),
}

_INCLUDE = re.compile(r"^--#include ([a-z_]+\.lua)$", re.MULTILINE)

# A write of the data source (seed.py) holds its tasks as a rescale does, with a lock of
# its own: "seed-<id>:<count>".
SEED_LOCK = "seed-"


@dataclass(frozen=True, slots=True)
class Script:
    """One script: its name, its ARGV order, its source and the SHA-1 Redis knows it by."""

    name: str
    argv: tuple[str, ...]
    source: str
    sha: str

    @classmethod
    def load(cls, name: str) -> Script:
        """Read `lua/<name>.lua` from the package, after the shared `lua/prelude.lua`.

        A line `--#include other.lua` is replaced by that script's text (open_commit.lua
        runs open.lua's and commit.lua's, each as a function of its KEYS and ARGV).
        """
        lua = resources.files(__package__).joinpath("lua")
        text = _INCLUDE.sub(
            lambda m: lua.joinpath(m.group(1)).read_text().rstrip("\n"),
            lua.joinpath(f"{name}.lua").read_text(),
        )
        source = lua.joinpath("prelude.lua").read_text() + text
        sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
        return cls(name, ARGV[name], source, sha)

    def args(self, rest: Iterable[Any] = (), **named: Any) -> list[Any]:
        """The ARGV: every named argument in this script's order, then `rest`."""
        if len(named) != len(self.argv) or not named.keys() >= set(self.argv):
            wrong = sorted(set(named) ^ set(self.argv))
            raise TypeError(f"script {self.name}: arguments {wrong} missing or unknown")
        return [*(named[n] for n in self.argv), *rest]


def load_all() -> dict[str, Script]:
    """Every script of the protocol, by name."""
    return {n: Script.load(n) for n in ARGV}


@dataclass(frozen=True, slots=True)
class Refused:
    """What turning a refusal into an error needs.

    The task (its fq id), the script, and what the request asked for.
    """

    task: str
    script: str
    batch: int | None = None
    codec: str = ""
    partitions: int | None = None
    epoch: int | None = None  # the epoch the refused request carried


def _rescaling(r: Refused, lock: str) -> SidecarError:
    if lock.startswith(SEED_LOCK):  # a write of the data source holds the task
        return errors.seeding(r.task)
    if r.script.startswith("rescale"):  # another rescale holds the task
        return errors.rescale_held(r.task, lock)
    return errors.rescaling(r.task, lock.rpartition(":")[2])  # the lock: "<id>:<count>"


def _fenced(r: Refused, epoch: str) -> SidecarError:
    if r.script == "import":
        return errors.import_fenced(r.task, epoch)
    return errors.stale_epoch(r.task, epoch, r.epoch)


def _lost(r: Refused, detail: str) -> SidecarError:
    what, _, rest = detail.partition(" ")
    return errors.state_lost_part(r.task, what, rest.split(), r.batch)


_REFUSALS: dict[str, Callable[[Refused, str], SidecarError]] = {
    "TSPARTS": lambda r, d: errors.partitions_changed(r.task, int(d), r.partitions),
    "TSRESCALING": _rescaling,
    "TSFENCED": _fenced,
    "TSAHEAD": lambda r, d: errors.state_ahead(r.task, d, r.batch),
    "TSNOUNDO": lambda r, d: errors.cannot_roll_back(r.task, d),
    "TSCODEC": lambda r, d: errors.codec_mismatch(r.task, d, r.codec),
    "TSCORRUPT": lambda r, d: errors.corrupt(r.task, d),
    "TSLOST": _lost,
    "TSNOTASK": lambda r, d: errors.not_found(r.task, r.task.partition("/")[0]),
    "TSEXISTS": lambda r, d: errors.already_exists(r.task),
    "TSTIME": lambda r, d: errors.event_time_needed(r.task),
    "TSDUPLICATE": lambda r, d: errors.seed_duplicate(
        r.task.split("/")[0], r.task.split("/")[1], d
    ),
}


def refusal(exc: rex.ResponseError, r: Refused) -> Exception:
    """A script's TS* error reply as a SidecarError (any other reply: `exc` itself)."""
    kind, _, detail = str(exc).partition(" ")
    make = _REFUSALS.get(kind)
    return exc if make is None else make(r, detail)
