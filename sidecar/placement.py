"""Where Spark's hash partitioning sends many keys at once: spark_hash.py, vectorized.

A write of the data source and a rescale place every key they move; spark_hash's
`partition_of` costs about 7 microseconds a key in Python, so a million keys would hold
the sidecar for seconds. Here the same Murmur3_x86_32 runs over numpy arrays: string keys
are grouped by their UTF-8 length (each group is one matrix of little-endian words and
trailing bytes), whole-number keys are hashed as Spark hashes ints and longs. Other key
types, and keys that do not read as their type, go through `partition_of` one by one
(which raises the ValueError naming the key). tests/unit/sidecar/test_placement.py
checks every answer against `partition_of`, which tests/e2e/sidecar/test_spark_hash.py
checks against Spark itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .spark_hash import SEED, partition_of

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_INT_RANGES = {
    "int": (-(2**31), 2**31 - 1),
    "short": (-(2**15), 2**15 - 1),
    "byte": (-128, 127),
}


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    return _rotl(h1 ^ k1, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: int) -> np.ndarray:
    h1 = h1 ^ np.uint32(length)
    h1 ^= h1 >> np.uint32(16)
    h1 *= np.uint32(0x85EBCA6B)
    h1 ^= h1 >> np.uint32(13)
    h1 *= np.uint32(0xC2B2AE35)
    h1 ^= h1 >> np.uint32(16)
    return h1


def _hash_strings(data: Sequence[bytes]) -> np.ndarray:
    """Spark's Murmur3 of each byte string (hashUnsafeBytes), as uint32."""
    n = len(data)
    lengths = np.fromiter(map(len, data), dtype=np.int64, count=n)
    out = np.empty(n, dtype=np.uint32)
    for length in np.unique(lengths).tolist():
        idx = np.flatnonzero(lengths == length)
        rows = np.frombuffer(b"".join([data[i] for i in idx.tolist()]), dtype=np.uint8)
        rows = rows.reshape(len(idx), length)
        h1 = np.full(len(idx), SEED, dtype=np.uint32)
        aligned = length - length % 4
        if aligned:
            words = np.ascontiguousarray(rows[:, :aligned]).view("<u4")
            for w in range(aligned // 4):
                h1 = _mix_h1(h1, _mix_k1(words[:, w].astype(np.uint32)))
        for j in range(aligned, length):  # each trailing byte, sign-extended
            tail = rows[:, j].view(np.int8).astype(np.int32).view(np.uint32)
            h1 = _mix_h1(h1, _mix_k1(tail))
        out[idx] = _fmix(h1, length)
    return out


def _hash_ints(values: np.ndarray) -> np.ndarray:
    """Murmur3 hashInt of int32 values."""
    k1 = values.astype(np.int32).view(np.uint32)
    return _fmix(_mix_h1(np.full(len(values), SEED, dtype=np.uint32), _mix_k1(k1)), 4)


def _hash_longs(values: np.ndarray) -> np.ndarray:
    """Murmur3 hashLong of int64 values."""
    v = values.astype(np.int64).view(np.uint64)
    low = (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (v >> np.uint64(32)).astype(np.uint32)
    h1 = _mix_h1(np.full(len(values), SEED, dtype=np.uint32), _mix_k1(low))
    return _fmix(_mix_h1(h1, _mix_k1(high)), 8)


def partitions_of(keys: Sequence[str], partitions: int, key_type: str = "string") -> list[int]:
    """`partition_of` of every key: what `repartition(partitions, col)` gives each.

    ValueError (from `partition_of`) for the first key that does not read as its type.
    """
    if partitions < 1:
        raise ValueError(f"a partition count must be at least 1, not {partitions}")
    if not keys:
        return []
    with np.errstate(over="ignore"):
        if key_type == "string":
            hashes = _hash_strings([k.encode("utf-8") for k in keys])
        elif key_type in _INT_RANGES or key_type == "long":
            try:
                ints = [int(k) for k in keys]
            except ValueError:
                return [partition_of(k, partitions, key_type) for k in keys]
            lo, hi = _INT_RANGES.get(key_type, (-(2**63), 2**63 - 1))
            if min(ints) < lo or max(ints) > hi:
                return [partition_of(k, partitions, key_type) for k in keys]
            if key_type == "long":
                hashes = _hash_longs(np.array(ints, dtype=np.int64))
            else:
                hashes = _hash_ints(np.array(ints, dtype=np.int64))
        else:
            return [partition_of(k, partitions, key_type) for k in keys]
    signed = hashes.view(np.int32).astype(np.int64)
    placed: list[int] = (signed % partitions).tolist()  # numpy's % is Spark's pmod for n > 0
    return placed
