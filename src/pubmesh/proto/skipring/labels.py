"""Labels of the skip ring and the topology SR(n) they induce (Feldmann et al. §2.1,
docs/protocols/skipring.md §1-§2, §6).

How it works
============
The supervisor names the subscribers of a topic with the labels l(0), l(1), ..., l(n-1), where
l moves the leading bit of x's binary representation to the end (l(0) = "0", l(1) = "1",
l(2) = "01", l(3) = "11", l(4) = "001", ...). A label b_1...b_k is also a number in [0, 1),
r(b) = sum b_i 2^-i, and the subscribers sit on a ring in the order of r. Every new label of
length d+1 lands in the middle of a gap between two labels of length <= d, so the labels are
always spread evenly and a node's neighbourhood only depends on labels (Feldmann et al. §2.1).

The one rule that keeps this module correct: **labels are bit strings, never floats.** A label is a
Python ``str`` over {"0", "1"}. Every valid label other than "0" ends in "1"
(docs/protocols/skipring.md §1 [D]); for such strings the lexicographic order of the strings *is*
the order of their r-values (if neither is a prefix of the other, the first differing bit decides
both orders; if a is a proper prefix of b, b ends in "1" so r(b) > r(a) and also a < b as strings).
So ``a < b`` compares r-values exactly, at any depth, and arithmetic on r-values (the shortcut
computation of §3.2.2) is done on integers scaled by a power of two. The testbed's ``float`` labels
break beyond 24 levels (docs/protocols/skipring.md §10.2); these do not.

Contents
--------
* :func:`label` (l), :func:`index` (l^-1), :func:`is_label` (image of l), :func:`r_value`;
* :func:`between_cyclic`, the cyclic "closer than" test of action (iii) (§3.2.1, spec §10.6);
* :func:`side_shortcuts`, the local computation of shortcut labels (§3.2.2, spec §6);
* :class:`SkipRingTopology`, SR(n) itself: ring neighbours and shortcut labels of every label,
  in closed form (spec §2), used by the legitimacy predicate, the tests and the analysis.
"""

from __future__ import annotations

import bisect
from fractions import Fraction
from typing import TypeVar

Label = str
"""A label: a non-empty bit string, "0" or ending in "1"."""

_Ordered = TypeVar("_Ordered", str, tuple[str, int])

ZERO: Label = "0"


def label(x: int) -> Label:
    """l(x): the binary representation of ``x`` with its leading bit moved to the end
    (Feldmann et al. §2.1; testbed ``Label.generateLabel``). l(0) = "0", l(1) = "1"."""
    if x < 0:
        raise ValueError(f"labels are defined for x >= 0, got {x}")
    if x < 2:
        return "1" if x else "0"
    bits = format(x, "b")
    return bits[1:] + bits[0]


def index(name: Label) -> int:
    """l^-1: move the last bit to the front and read the result in binary (testbed
    ``reconvertLabelToNumber``). Only meaningful for labels (see :func:`is_label`)."""
    if len(name) > 1:
        return int(name[-1] + name[:-1], 2)
    return int(name, 2)


def is_label(name: object) -> bool:
    """Whether ``name`` is in the image of l: "0", or a bit string that ends in "1".

    A stored label outside the image (say "10" or "") is treated as no label at all
    (docs/protocols/skipring.md §10.2)."""
    if not isinstance(name, str) or not name:
        return False
    if name == ZERO:
        return True
    return name[-1] == "1" and name.strip("01") == ""


def length(name: Label) -> int:
    """|label|, the number of bits (Feldmann et al. §2.1): 1 for l(0) and l(1)."""
    return len(name)


def r_value(name: Label) -> Fraction:
    """r(b_1..b_k) = sum b_i 2^-i, exactly (Feldmann et al. §2.1). For display and tests; the
    protocol compares labels as strings (see the module docstring)."""
    return Fraction(int(name, 2), 1 << len(name))


def from_fraction(value: Fraction) -> Label:
    """The label whose r-value is ``value`` (a dyadic rational in [0, 1]; 1 maps to "0")."""
    if value == 1 or value == 0:
        return ZERO
    if not 0 < value < 1 or value.denominator & (value.denominator - 1):
        raise ValueError(f"{value} is not a dyadic rational in [0, 1]")
    bits = value.denominator.bit_length() - 1
    return format(value.numerator, "b").zfill(bits)


def ring_length(n: int) -> int:
    """L = ceil(log2 n): the length of the longest label in a legitimate state with n >= 2
    subscribers (Feldmann et al. §3.2.1; spec §2). 1 for n <= 2."""
    return max(1, (n - 1).bit_length())


def request_probability(name: Label, base: float) -> float:
    """p(|label|) = base^-|label| of action (ii) (spec §5 [R]: base 4 keeps the expected number
    of configuration requests per timeout interval below 3/4 for every n)."""
    return float(base) ** -len(name)


def between_cyclic(low: _Ordered, mid: _Ordered, high: _Ordered) -> bool:
    """Whether ``mid`` lies strictly inside the cyclic interval from ``low`` to ``high``, going
    in increasing r (with wrap-around from the largest label to "0"; spec §10.6). Works on
    labels and on (label, node) pairs, the order linearization uses.

    When ``low == high`` (a two-node ring, both neighbours are the same node) every other value
    is inside."""
    if low < high:
        return low < mid < high
    if low > high:
        return mid > low or mid < high
    return mid != low


def _to_label(numerator: int, bits: int) -> Label:
    """The label of numerator / 2^bits, for 0 <= numerator <= 2^bits (1 and 0 map to "0")."""
    if numerator == 0 or numerator == 1 << bits:
        return ZERO
    text = format(numerator, "b").zfill(bits).rstrip("0")
    return text


def side_shortcuts(own: Label, neighbour: Label, *, right: bool, wrapped: bool) -> list[Label]:
    """The shortcut labels v = ``own`` computes on one side from its ring neighbour there
    (Feldmann et al. §3.2.2, testbed ``BuildSON.updateShortcuts``, spec §6).

    Starting from the neighbour's label ``cur``: while |cur| > |v|, the label
    x = 2 r(cur) - r(v) is the node that was v's neighbour when cur was inserted between them,
    so it is a shortcut; continue from x. Stop when x falls outside [0, 1] or when a label no
    longer than v's is reached (that last one is included: it is v's level-|v| neighbour).

    ``wrapped`` says the neighbour is reached over the closing edge of the ring (the left
    neighbour of node "0" is the largest label): the arithmetic then runs on the unrolled ring,
    r(v) + 1 on the left side and r(cur) + 1 on the right side. Exact integer arithmetic: both
    values are scaled by 2^m for m = max(|cur|, |v|).
    """
    out: list[Label] = []
    own_len = len(own)
    own_num = int(own, 2)
    cur = neighbour
    first = True
    while len(cur) > own_len:
        bits = len(cur)  # > own_len, so 2^|cur| is a common denominator
        one = 1 << bits
        cur_num = int(cur, 2)
        v_num = own_num << (bits - own_len)
        if wrapped and not right:
            v_num += one  # v sits at r(v) + 1 on the unrolled ring, left of it lies [0, 1)
        elif wrapped and first:
            cur_num += one  # the right neighbour over the closing edge sits at r(cur) + 1
        first = False
        x = 2 * cur_num - v_num
        if x < 0 or x > one:
            break
        cur = _to_label(x, bits)
        out.append(cur)
    if own in out:
        out.remove(own)
    return out


class SkipRingTopology:
    """SR(n): labels l(0..n-1), their ring neighbours and shortcut labels (Feldmann et al. §2.1,
    docs/protocols/skipring.md §2). Pure arithmetic on labels; knows nothing about nodes.

    * Ring edges E_R join labels consecutive in r, including the closing edge between the
      largest label and "0".
    * Level-i shortcuts, for i in 1..L-1, join labels consecutive in the ring over
      V_i = {labels of length <= i}; in closed form the level-i neighbours of v are
      r(v) +- 2^-i (mod 1), present for i >= |v| (spec §2 item 4 [D]).
    * :meth:`shortcut_labels` leaves out shortcuts that coincide with a ring edge (a partly
      filled level L; spec §2 item 4) and v itself.
    """

    def __init__(self, n: int) -> None:
        if n < 0:
            raise ValueError("n must be >= 0")
        self.n = n
        self.L = ring_length(n)
        self.labels: list[Label] = sorted(label(i) for i in range(n))

    def position(self, name: Label) -> int:
        pos = bisect.bisect_left(self.labels, name)
        if pos >= len(self.labels) or self.labels[pos] != name:
            raise KeyError(name)
        return pos

    def predecessor(self, name: Label) -> Label | None:
        """The cyclic predecessor in r (None when n = 1)."""
        if self.n < 2:
            return None
        return self.labels[self.position(name) - 1]

    def successor(self, name: Label) -> Label | None:
        if self.n < 2:
            return None
        return self.labels[(self.position(name) + 1) % self.n]

    def slots(self, name: Label) -> tuple[Label | None, Label | None, Label | None]:
        """(left, right, ring) of the node labelled ``name`` in a legitimate state: the closest
        smaller and larger labels, and the closing edge for the smallest and largest node
        (Feldmann et al. §2.2; spec §3)."""
        if self.n < 2:
            return None, None, None
        pos = self.position(name)
        left = self.labels[pos - 1] if pos > 0 else None
        right = self.labels[pos + 1] if pos + 1 < self.n else None
        ring = None
        if pos == 0:
            ring = self.labels[-1]
        elif pos == self.n - 1:
            ring = self.labels[0]
        return left, right, ring

    def ring_neighbours(self, name: Label) -> set[Label]:
        return {x for x in self.slots(name) if x is not None}

    def all_shortcut_labels(self, name: Label) -> set[Label]:
        """Every level-i neighbour for i in |v|..L-1, before removing ring edges."""
        out: set[Label] = set()
        bits = self.L
        one = 1 << bits
        num = int(name, 2) << (bits - len(name)) if len(name) <= bits else None
        if num is None:
            return out
        for level in range(len(name), bits):
            step = 1 << (bits - level)
            out.add(_to_label((num + step) % one, bits))
            out.add(_to_label((num - step) % one, bits))
        out.discard(name)
        return out

    def shortcut_labels(self, name: Label) -> set[Label]:
        """Shortcut labels of ``name`` that are not also ring neighbours."""
        return self.all_shortcut_labels(name) - self.ring_neighbours(name)

    def edges(self) -> set[tuple[Label, Label]]:
        """All undirected edges (ring and shortcut) as sorted label pairs."""
        out: set[tuple[Label, Label]] = set()
        for name in self.labels:
            for other in self.ring_neighbours(name) | self.shortcut_labels(name):
                out.add((min(name, other), max(name, other)))
        return out
