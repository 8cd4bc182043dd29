"""The one spelling of a durability level: its text, its value and its wire form.

A commit is acknowledged once it is `applied` by Redis (the default), `replicated:N`
(WAIT: N replicas have it), `fsynced` (WAITAOF: on disk), or `replicated:N,fsynced`.
The client parses the user's text; the request carries the `taskstate.v1.Durability`
enum and a replica count; the sidecar reads them back. All three go through `Durability`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import taskstate_pb2 as pb

MAX_REPLICAS = 100

_WIRE: dict[tuple[bool, bool], pb.Durability] = {
    (False, False): pb.DURABILITY_APPLIED,
    (True, False): pb.DURABILITY_REPLICATED,
    (False, True): pb.DURABILITY_FSYNCED,
    (True, True): pb.DURABILITY_REPLICATED_FSYNCED,
}


@dataclass(frozen=True, slots=True)
class Durability:
    """How far a commit must have travelled before it is acknowledged."""

    replicas: int = 0
    fsynced: bool = False

    @classmethod
    def parse(cls, text: str) -> Durability:
        """The user's text -> a Durability; ValueError naming the text otherwise."""
        if not isinstance(text, str):
            raise ValueError(f"durability must be a string, got {type(text).__name__}")
        replicas, fsynced = 0, False
        for part in text.replace("+", ",").split(","):
            part = part.strip()
            if part == "applied" and text.strip() == "applied":
                continue
            if part == "fsynced":
                fsynced = True
            elif part.startswith("replicated:") and part[len("replicated:") :].isdigit():
                replicas = int(part[len("replicated:") :])
                if not 1 <= replicas <= MAX_REPLICAS:
                    raise ValueError(f"durability {text!r}: replicas must be 1..{MAX_REPLICAS}")
            else:
                raise ValueError(
                    f"durability {text!r} is not understood: use 'applied', 'replicated:N', "
                    "'fsynced' or 'replicated:N,fsynced'"
                )
        return cls(replicas, fsynced)

    def __str__(self) -> str:
        parts = [f"replicated:{self.replicas}"] if self.replicas else []
        if self.fsynced:
            parts.append("fsynced")
        return ",".join(parts) or "applied"

    def to_wire(self) -> tuple[pb.Durability, int]:
        """(the `Durability` enum, the replica count) a request carries."""
        return _WIRE[(self.replicas > 0, self.fsynced)], self.replicas

    @classmethod
    def from_wire(cls, kind: int, replicas: int) -> Durability:
        """A request's enum and replica count -> a Durability; ValueError when impossible."""
        if not 0 <= replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas {replicas} is out of range 0..{MAX_REPLICAS}")
        if kind in (pb.DURABILITY_UNSPECIFIED, pb.DURABILITY_APPLIED):
            return cls()
        if kind == pb.DURABILITY_REPLICATED:
            if replicas < 1:
                raise ValueError("durability replicated needs replicas >= 1")
            return cls(replicas=replicas)
        if kind == pb.DURABILITY_FSYNCED:
            return cls(fsynced=True)
        if kind == pb.DURABILITY_REPLICATED_FSYNCED:
            return cls(replicas=max(replicas, 1), fsynced=True)
        raise ValueError(f"unknown durability {kind}")
