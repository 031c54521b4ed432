"""Edge filters of the chord stack: the three routing strategies, the union filter h, and
matching against a filter (Terpstra et al. §2.1, §4.2, §4.4; docs/protocols/chord.md §4, §6).

An *edge filter* f(u→v) is a disjunction: a tuple of canonical conjunctions sorted by their
text. How it is reduced after every change is the routing strategy (Terpstra et al. §2.1, Rebeca):

* ``simple``: every subscription travels on its own. The filter is the sorted *multiset* of
  satisfiable conjunctions, duplicates kept, so a second identical subscription is a second
  entry and costs a second filter wave (the spec's §6 cost figures count it so).
* ``covering``: "tests whether a filter F1 accepts a superset of notifications of a second
  filter F2, and in this case replaces all occurrences of F2": spec §4 steps 1–2.
* ``merging``: covering plus perfect merges and, beyond ``max_conj``/``max_in``, imperfect
  merges (spec §4 steps 1–4; imperfect merges add false positives only).

The loopback f(u→u) is reduced by the same strategy but never bounded (spec §4 "Loopback":
steps 1–3 only), so it matches exactly u's own subscriptions and maintenance conjunctions.

Maintenance conjunctions (the location and join intervals of spec §7, ``$``-topics) are hulled
to at most 4 per topic on *every* edge filter, in every mode, not only beyond ``max_conj``
(spec §4 "Imperfect merge" hulls them first once the bound is exceeded; we hull them always).
Each node holds about log₂N + 2 such intervals, and they rarely merge perfectly, so without the
hull an edge whose range spans m nodes carries ~m·(log₂N + 2) of them: at N = 1,000 about 1,300
on the mean edge, which swamps the subscription conjunctions the routing modes are compared on
(spec §11.8) and makes every reduction quadratic in them. A hull only widens a maintenance
filter: a location or join notification may travel an edge it did not need, never miss one.
The routing strategies apply to the subscription conjunctions.

Filters travel as the canonical texts of their conjunctions (see :mod:`.messages`);
:func:`parse_filter` turns texts back into conjunctions through a cache keyed by the text, so a
conjunction that reaches a node in many updates is validated once per process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from pubmesh.proto.content import (
    Conjunction,
    Disjunction,
    FilterError,
    Reducer,
    maintenance_topic,
    matches,
    reduce,
    reducer,
    validate,
)
from pubmesh.proto.content.values import is_scalar

#: the match-all filter a freshly carved edge forwards on until its first FilterUpdate (spec §7)
MATCH_ALL: Disjunction = (validate({}),)


def reduce_edge(
    conjunctions: Iterable[Conjunction],
    routing: str,
    *,
    max_conj: int,
    max_in: int,
    bound: bool,
) -> Disjunction:
    """The canonical edge filter of ``conjunctions`` under ``routing`` (module doc); without
    ``bound`` the loopback's exact reduction."""
    if routing == "merging":
        return reduce(
            conjunctions, max_conj=max_conj, max_in=max_in, bound=bound, hull_maintenance=True
        )
    conjunctions = tuple(conjunctions)
    hulled: Disjunction = ()
    if bound:  # the maintenance hull (module doc), then the strategy on the subscriptions
        maintenance = [c for c in conjunctions if is_maintenance(c)]
        if maintenance:
            hulled = reduce(maintenance, max_in=max_in, hull_maintenance=True)
            conjunctions = tuple(c for c in conjunctions if not is_maintenance(c))
    if routing == "simple":
        kept = tuple(c for c in conjunctions if c.satisfiable)
    else:
        kept = reduce(conjunctions, merge=False)
    return tuple(sorted((*hulled, *kept)))


class _Level:
    """One prefix of a :class:`PrefixChain`: its last part, the reducer after it, and the
    results of that prefix followed by one more part (keyed by that part)."""

    __slots__ = ("part", "reducer", "results")

    def __init__(self, part: Disjunction, reducer: Reducer) -> None:
        self.part = part
        self.reducer = reducer
        self.results: dict[Disjunction, Disjunction] = {}


#: results kept per prefix before they are forgotten (clipped last parts come and go)
_RESULTS_KEPT = 16


class PrefixChain:
    """Union filters of nested ranges, reduced once per shared prefix (Terpstra et al. §4.4).

    Every h that a node v computes for a range [key(v), e) (spec §4 "Union h") is the
    reduction of v's loopback followed by the filters of v's edges in increasing distance, up
    to the edge whose range e ends in, whose filter may be the clipped one: a prefix of one
    sequence, plus at most one last part. With the ``merging`` strategy the reduction is one
    pass of inserts in input order (:class:`pubmesh.proto.content.Reducer`), so the chain keeps
    the reducer after each prefix and continues from the longest prefix that is unchanged:
    the in-neighbours' h share their inserts, and after a FilterUpdate from the j-th edge only
    the parts from j on are inserted again. The results are exactly :func:`reduce_edge`'s (the
    same inserts in the same order); only the work is shared."""

    __slots__ = ("levels", "max_conj", "max_in")

    def __init__(self, *, max_conj: int, max_in: int) -> None:
        self.levels: list[_Level] = []
        self.max_conj, self.max_in = max_conj, max_in

    def reduce(self, head: Sequence[Disjunction], last: Disjunction = ()) -> Disjunction:
        """reduce_edge(concatenation of ``head`` and ``last``, "merging", bound=True); ``head``
        must not be empty (it starts with the loopback)."""
        levels = self.levels
        j = 0
        while j < len(head) and j < len(levels) and levels[j].part == head[j]:
            j += 1
        if j < len(head):
            del levels[j:]
            for part in head[j:]:
                if levels:
                    grown = levels[-1].reducer.copy()
                else:
                    grown = reducer(
                        max_conj=self.max_conj,
                        max_in=self.max_in,
                        bound=True,
                        hull_maintenance=True,
                    )
                grown.extend(part)
                levels.append(_Level(part, grown))
        level = levels[len(head) - 1]
        result = level.results.get(last)
        if result is None:
            if last:
                grown = level.reducer.copy()
                grown.extend(last)
            else:
                grown = level.reducer
            result = grown.result()
            if len(level.results) >= _RESULTS_KEPT:
                level.results.clear()
            level.results[last] = result
        return result


def is_maintenance(conj: Conjunction) -> bool:
    """Is ``conj`` a maintenance subscription (its topic a reserved ``$`` name, spec §7)?"""
    return maintenance_topic(conj) is not None


def texts(filter: Disjunction) -> tuple[str, ...]:
    """The wire form of an edge filter."""
    return tuple(c.text for c in filter)


@lru_cache(maxsize=1 << 16)
def _parse_text(text: str) -> Conjunction | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    try:
        return validate(value, allow_reserved=True)
    except (FilterError, TypeError, ValueError):
        return None


def parse_conjunction(text: object) -> Conjunction | None:
    """One conjunction from its canonical text (a history query's filter, spec §14); None if
    it is not a valid filter."""
    return _parse_text(text) if isinstance(text, str) else None


def parse_filter(wire: object) -> Disjunction | None:
    """An edge filter from its wire form, in canonical order; None if any text is not a valid
    filter (the whole update is then refused, spec §4 "Rejected")."""
    if not isinstance(wire, tuple | list):
        return None
    out = []
    for text in wire:
        if not isinstance(text, str):
            return None
        conj = _parse_text(text)
        if conj is None:
            return None
        out.append(conj)
    return tuple(sorted(out))


def match_attributes(attributes: object) -> dict[str, Any] | None:
    """The attributes a filter is evaluated on: string names with scalar values (a JSON
    publication's attributes); None if ``attributes`` is not a mapping at all."""
    if not isinstance(attributes, Mapping):
        return None
    return {k: v for k, v in attributes.items() if isinstance(k, str) and is_scalar(v)}


def matches_any(filter: Disjunction, attributes: Mapping[str, Any]) -> bool:
    """Does some conjunction of ``filter`` match?"""
    return any(matches(c, attributes) for c in filter)
