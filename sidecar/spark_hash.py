"""Which partition Spark's hash partitioning gives a key: `pmod(hash(key), n)`.

`repartition(n, col)`, `groupBy(...).applyInPandasWithState` and transformWithState
route a row by `HashPartitioning`: `Pmod(Murmur3Hash(cols, seed=42), n)`. This is a
faithful reimplementation of Spark's `Murmur3_x86_32` (including its historical
treatment of trailing bytes, which differs from the reference MurmurHash3) and of how
`Murmur3Hash` feeds each type to it. tests/e2e/sidecar/test_spark_hash.py checks it against
Spark's own `hash()` and `spark_partition_id()` on many keys of every type here.

A key reaches us as the text of a state key, so each type names how that text is
read back to the value the job partitioned by.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable

SEED = 42  # Murmur3Hash's default seed (HashExpression)

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _M32
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _M32


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1


def _signed(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def hash_int(value: int, seed: int = SEED) -> int:
    """Murmur3_x86_32.hashInt: int, short, byte, date, boolean."""
    return _signed(_fmix(_mix_h1(seed & _M32, _mix_k1(value & _M32)), 4))


def hash_long(value: int, seed: int = SEED) -> int:
    """Murmur3_x86_32.hashLong: long, timestamp."""
    v = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & _M32, _mix_k1(v & _M32))
    h1 = _mix_h1(h1, _mix_k1(v >> 32))
    return _signed(_fmix(h1, 8))


def hash_bytes(data: bytes, seed: int = SEED) -> int:
    """Murmur3_x86_32.hashUnsafeBytes: strings (UTF-8) and binary.

    Whole little-endian words first; then each trailing byte, sign-extended, as a word
    of its own (Spark's compatibility quirk).
    """
    n = len(data)
    aligned = n - n % 4
    h1 = seed & _M32
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for b in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & _M32))
    return _signed(_fmix(h1, n))


def _float_bits(f: float) -> int:
    if f == 0.0:  # -0.0 hashes as 0.0
        return 0
    if f != f:  # every NaN as Java's canonical floatToIntBits NaN
        return 0x7FC00000
    bits: int = struct.unpack("<I", struct.pack("<f", f))[0]
    return bits


def _double_bits(f: float) -> int:
    if f == 0.0:
        return 0
    if f != f:
        return 0x7FF8000000000000
    bits: int = struct.unpack("<Q", struct.pack("<d", f))[0]
    return bits


def _int_in(lo: int, hi: int, name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        v = int(text)
        if not lo <= v <= hi:
            raise ValueError(f"{text!r} is outside the {name} range [{lo}, {hi}]")
        return v

    return parse


def _boolean(text: str) -> int:
    low = text.strip().lower()
    if low in ("true", "1"):
        return 1
    if low in ("false", "0"):
        return 0
    raise ValueError(f"{text!r} is not a boolean (true/false)")


def _date(text: str) -> int:
    return (datetime.date.fromisoformat(text) - datetime.date(1970, 1, 1)).days


# key type -> (text -> hash with the seed): how a state key's text is the column's value
_HASHERS: dict[str, Callable[[str, int], int]] = {
    "string": lambda t, s: hash_bytes(t.encode("utf-8"), s),
    "int": lambda t, s: hash_int(_int_in(-(2**31), 2**31 - 1, "int")(t), s),
    "long": lambda t, s: hash_long(_int_in(-(2**63), 2**63 - 1, "long")(t), s),
    "short": lambda t, s: hash_int(_int_in(-(2**15), 2**15 - 1, "short")(t), s),
    "byte": lambda t, s: hash_int(_int_in(-128, 127, "byte")(t), s),
    "boolean": lambda t, s: hash_int(_boolean(t), s),
    "float": lambda t, s: hash_int(_float_bits(float(t)), s),
    "double": lambda t, s: hash_long(_double_bits(float(t)), s),
    "date": lambda t, s: hash_int(_date(t), s),
}

KEY_TYPES = tuple(_HASHERS)
KEY_TYPE_HELP = (
    "string: the key's text (UTF-8); int, long, short, byte: its decimal form; boolean: "
    "true/false; float, double: a decimal number; date: YYYY-MM-DD"
)


def murmur3(key: str, key_type: str = "string", seed: int = SEED) -> int:
    """Spark's `hash(col)` of the column value whose text is `key` (ValueError if unreadable)."""
    try:
        hasher = _HASHERS[key_type]
    except KeyError:
        raise ValueError(f"unknown key type {key_type!r}; one of: {', '.join(KEY_TYPES)}") from None
    try:
        return hasher(key, seed)
    except (OverflowError, struct.error) as exc:  # a float beyond float32's range
        raise ValueError(f"{key!r} is not a {key_type}: {exc}") from None


def partition_of(key: str, partitions: int, key_type: str = "string") -> int:
    """The partition `repartition(partitions, col)` sends the key to: pmod(hash, n)."""
    if partitions < 1:
        raise ValueError(f"a partition count must be at least 1, not {partitions}")
    return murmur3(key, key_type) % partitions  # Python's % is Spark's pmod for n > 0
