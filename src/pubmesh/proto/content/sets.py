"""Value sets of one kind (numbers or strings): the algebra under the filter normal form.

docs/protocols/chord.md §4 "Normal form": per attribute and per kind, a value set is either a finite
set A (:class:`Points`) or an interval I minus a finite set E ⊂ I (:class:`Span`). This module knows
nothing of JSON or of kinds; it orders values with ``<`` and is used with ``float`` (numbers,
treated as reals) and ``str`` (code-point order). String spans always carry a lower bound (``""``
closed is "no lower bound"), which keeps them expressible as filter operators.

Every constructor goes through :func:`span`, which normalizes: an empty interval becomes the
empty :class:`Points`, a closed one-point interval becomes that point, holes outside the open
interior are dropped, and a hole at a closed end opens that end. Hence equal sets usually have
equal representations, although not always (the strings in ["a", "a\\x00") are just "a"): the
operations below are exact where they say so and *sound* (never claim too much) everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "KindSet",
    "Points",
    "Span",
    "contains",
    "covers",
    "hull",
    "intersect",
    "is_empty",
    "points",
    "span",
    "union",
]

T = TypeVar("T", float, str)


@dataclass(frozen=True, slots=True)
class Points(Generic[T]):
    """A finite set of values (eq / in); empty means "no value of this kind"."""

    values: frozenset[T]


@dataclass(frozen=True, slots=True)
class Span(Generic[T]):
    """The interval between ``lo`` and ``hi`` (None = unbounded) minus the finite ``holes``."""

    lo: T | None
    lo_closed: bool
    hi: T | None
    hi_closed: bool
    holes: frozenset[T]


KindSet = Points[T] | Span[T]


def points(values: Iterable[T]) -> Points[T]:
    return Points(frozenset(values))


def _above_lo(s: Span[T], x: T) -> bool:
    return s.lo is None or s.lo < x or (s.lo_closed and s.lo == x)


def _below_hi(s: Span[T], x: T) -> bool:
    return s.hi is None or x < s.hi or (s.hi_closed and x == s.hi)


def _in_interval(s: Span[T], x: T) -> bool:
    return _above_lo(s, x) and _below_hi(s, x)


def span(
    lo: T | None, lo_closed: bool, hi: T | None, hi_closed: bool, holes: Iterable[T] = ()
) -> KindSet[T]:
    """The normalized set ⟨lo, hi⟩ ∖ holes (see the module doc)."""
    if lo is not None and hi is not None:
        if hi < lo or (lo == hi and not (lo_closed and hi_closed)):
            return Points(frozenset())
        if lo == hi:
            return Points(frozenset() if lo in holes else frozenset((lo,)))
    raw = Span(lo, lo_closed, hi, hi_closed, frozenset())
    kept = {h for h in holes if _in_interval(raw, h)}
    if lo is not None and lo_closed and lo in kept:
        kept.discard(lo)
        lo_closed = False
    if hi is not None and hi_closed and hi in kept:
        kept.discard(hi)
        hi_closed = False
    return Span(lo, lo_closed, hi, hi_closed, frozenset(kept))


def is_empty(v: KindSet[T]) -> bool:
    return isinstance(v, Points) and not v.values  # a normalized Span is never empty


def contains(v: KindSet[T], x: T) -> bool:
    if isinstance(v, Points):
        return x in v.values
    return _in_interval(v, x) and x not in v.holes


def intersect(a: KindSet[T], b: KindSet[T]) -> KindSet[T]:
    """a ∩ b, exact."""
    if isinstance(a, Points):
        return Points(frozenset(x for x in a.values if contains(b, x)))
    if isinstance(b, Points):
        return intersect(b, a)
    lo_a, lo_b = (a.lo, a.lo_closed), (b.lo, b.lo_closed)
    hi_a, hi_b = (a.hi, a.hi_closed), (b.hi, b.hi_closed)
    lo = lo_b if _lower_within(lo_a, lo_b) else lo_a  # the tighter lower bound
    hi = hi_b if _upper_within(hi_a, hi_b) else hi_a
    return span(lo[0], lo[1], hi[0], hi[1], a.holes | b.holes)


def _lower_within(outer: tuple[T | None, bool], inner: tuple[T | None, bool]) -> bool:
    """Does lower bound ``outer`` admit everything lower bound ``inner`` admits?"""
    (x, x_closed), (y, y_closed) = outer, inner
    if x is None:
        return True
    if y is None:
        return False
    return x < y or (x == y and (x_closed or not y_closed))


def _upper_within(outer: tuple[T | None, bool], inner: tuple[T | None, bool]) -> bool:
    (x, x_closed), (y, y_closed) = outer, inner
    if x is None:
        return True
    if y is None:
        return False
    return y < x or (x == y and (x_closed or not y_closed))


def covers(a: KindSet[T], b: KindSet[T]) -> bool:
    """a ⊇ b (docs/protocols/chord.md §4 "Covering", first rule). Exact except that a finite set is
    never said to cover an interval."""
    if isinstance(b, Points):
        return all(contains(a, x) for x in b.values)
    if isinstance(a, Points):
        return False
    if not _lower_within((a.lo, a.lo_closed), (b.lo, b.lo_closed)):
        return False
    if not _upper_within((a.hi, a.hi_closed), (b.hi, b.hi_closed)):
        return False
    return all(h in b.holes or not _in_interval(b, h) for h in a.holes)


def union(a: KindSet[T], b: KindSet[T]) -> KindSet[T] | None:
    """a ∪ b if it is again one :data:`KindSet`, else None (a gap between the two)."""
    if is_empty(a):
        return b
    if is_empty(b):
        return a
    if isinstance(a, Points) and isinstance(b, Points):
        return Points(a.values | b.values)
    if isinstance(a, Points):
        a, b = b, a
    assert isinstance(a, Span)
    if isinstance(b, Points):
        lo_closed = a.lo_closed or a.lo in b.values
        hi_closed = a.hi_closed or a.hi in b.values
        grown = span(a.lo, lo_closed, a.hi, hi_closed, a.holes - b.values)
        return grown if all(contains(grown, x) for x in b.values) else None
    first, second = (a, b) if _lower_within((a.lo, a.lo_closed), (b.lo, b.lo_closed)) else (b, a)
    holes = {h for h in first.holes if not contains(second, h)}
    holes |= {h for h in second.holes if not contains(first, h)}
    if first.hi is not None and second.lo is not None:
        if first.hi < second.lo:
            return None
        if first.hi == second.lo and not (first.hi_closed or second.lo_closed):
            holes.add(first.hi)  # (…, a) ∪ (a, …): the hull minus the one open point a
    if _upper_within((first.hi, first.hi_closed), (second.hi, second.hi_closed)):
        hi, hi_closed = first.hi, first.hi_closed
    else:
        hi, hi_closed = second.hi, second.hi_closed
    return span(first.lo, first.lo_closed, hi, hi_closed, holes)


def hull(a: KindSet[T], b: KindSet[T]) -> KindSet[T]:
    """The smallest interval without holes containing a ∪ b (the empty set if both are)."""
    bounds: list[tuple[tuple[T | None, bool], tuple[T | None, bool]]] = []
    for v in (a, b):
        if isinstance(v, Points):
            if v.values:
                low, high = min(v.values), max(v.values)
                bounds.append(((low, True), (high, True)))
        else:
            bounds.append(((v.lo, v.lo_closed), (v.hi, v.hi_closed)))
    if not bounds:
        return Points(frozenset())
    lo, hi = bounds[0]
    for other_lo, other_hi in bounds[1:]:
        if not _lower_within(lo, other_lo):
            lo = other_lo
        if not _upper_within(hi, other_hi):
            hi = other_hi
    return span(lo[0], lo[1], hi[0], hi[1])
