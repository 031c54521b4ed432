"""The key space of Terpstra et al. §4.1 and the arcs of the responsibility ranges (spec §2).

K = [0, 2^m) with m = 64 (spec §2 [R]: the paper's 160 bits do not fit msgpack integers, and a
collision among 10^6 nodes has probability ≈ 3·10⁻⁸). Every node computes every key itself
from the node id, so keys never travel as node attributes: key(id) = the first 8 bytes of
SHA-256(b"pubmesh-chord:" + str(id)), big-endian; the same for simulator ids and network ids.

Distances go clockwise: d(a, b) = (b − a) mod 2^m. The arc [a, b) holds the keys k with
d(a, k) < d(a, b); its size is d(a, b), and [a, a) stands for all of K (only a publisher's
initial range, spec §5).

Keys inside maintenance attributes. The content matcher compares numbers as doubles (the
analysis does, spec §4 "Matching"), which are exact only below 2^53: a 64-bit key there would
be rounded, and two keys 2^11 apart would compare equal. Maintenance conjunctions and
notifications therefore carry keys as :func:`key_text`, "k" followed by 16 hex digits: strings
compare in code-point order, which for fixed-width hex is numeric order, exactly, and the
leading "k" keeps the matcher from reading the text as a decimal number.
"""

from __future__ import annotations

import hashlib

M = 64
SIZE = 1 << M
MASK = SIZE - 1


def hashed_key(node: int) -> int:
    """key(id) of spec §2: SHA-256 of the id's decimal text, first 8 bytes, big-endian."""
    digest = hashlib.sha256(b"pubmesh-chord:" + str(node).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def even_key(node: int, n_even: int) -> int:
    """Test-only evenly spaced key ⌊i·2^64/n_even⌋ (spec §2); ids ≥ n_even hash."""
    if 0 <= node < n_even:
        return node * SIZE // n_even
    return hashed_key(node)


def dist(a: int, b: int) -> int:
    """d(a, b): clockwise distance from key a to key b."""
    return (b - a) & MASK


def finger_offset(k: int) -> int:
    """D_k = 2^(m−k), k = 1…m (Terpstra et al. §4.1: the k-th publishing edge lies at least |K|/2^k
    away)."""
    return 1 << (M - k)


def key_text(key: int) -> str:
    """A key as an exactly ordered, never-numeric string (module doc)."""
    return f"k{key:016x}"


def text_key(text: object) -> int | None:
    """The key of a :func:`key_text` string, or None if ``text`` is not one."""
    if not isinstance(text, str) or len(text) != 17 or text[0] != "k":
        return None
    try:
        return int(text[1:], 16)
    except ValueError:
        return None
