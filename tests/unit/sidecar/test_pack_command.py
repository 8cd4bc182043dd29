"""The sidecar's command packer: large arguments in pieces, the bytes hiredis would send."""

from __future__ import annotations

from typing import Any

import hiredis
import pytest

from taskstate.sidecar.storage.redis.connect import LARGE_ARG, _hiredis_pack_command, resp_pieces

BIG = b"\x00\r\n$" * (LARGE_ARG // 4 + 1)  # RESP's own bytes inside: sent as they are


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "a" * 40, 6, "m", "d", "u", "l", "t", "tu", "3", "", -1, 0, BIG, b"", BIG),
        ("SET", "k", BIG),
        ("HSET", "ключ", "wert ü", BIG + b"x"),
        (b"HSCAN", "k", 0, "COUNT", 2000),
    ],
)
def test_pieces_are_what_hiredis_packs(args: tuple[Any, ...]) -> None:
    assert b"".join(resp_pieces(args)) == hiredis.pack_command(args)
    assert b"".join(_hiredis_pack_command(None, *args)) == hiredis.pack_command(args)


def test_a_large_argument_is_its_own_piece_not_a_copy() -> None:
    pieces = _hiredis_pack_command(None, "EVALSHA", "f" * 40, 1, "k", BIG)
    assert any(p is BIG for p in pieces)
    args: tuple[Any, ...] = ("SET", "k", b"v" * 100)
    assert _hiredis_pack_command(None, *args) == [hiredis.pack_command(args)]


def test_other_argument_types_go_to_hiredis_whole() -> None:
    args: tuple[Any, ...] = ("SET", "k", 1.5, BIG)
    assert resp_pieces(args) == [hiredis.pack_command(args)]
