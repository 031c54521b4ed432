"""Content filters: validation, matching, normal form, covering, merging and reduction.

This is the building block of the content-based stacks (chord, brokertree). It implements
docs/protocols/chord.md §4 "Filters" and the routing vocabulary of Terpstra et al. §2.1 (Rebeca):
*covering* ("tests whether a filter F1 accepts a superset of notifications of a second filter F2,
and in this case replaces all occurrences of F2"), *perfect merging* ("merged filters only accept
notifications that are accepted by at least one of its base filters") and *imperfect merging*
("accept notifications beyond their base filters"). The paper defines the relations only (f covers g
iff f ⊇ g; a merge h ⊇ f ∪ g, §4.1); the rules that decide them here are the spec's [R]
reconstruction, each cited below at the function that implements it.

**The language** (analysis/metrics.py docstring; docs/protocols/chord.md §4 "Language"). A filter is
a JSON object ANDing one constraint per attribute. A constraint is a bare value (eq) or an object
ANDing operators ``eq ne lt le gt ge prefix in``; ``{}`` matches everything. :func:`validate`
rejects what the spec rejects at Subscribe (unknown operators, a ``{}`` constraint, a non-list
``in``, ``$`` attributes) and, so that a filter means the same to the analysis as to us, also
operands that are null, nested, non-finite, or bare strings starting with ``{`` (the analysis reads
a constraint text starting with ``{`` as an operator object).

**Matching** mirrors the analysis matcher exactly (spec §4 "Matching"), and so has two faces:

* :func:`matches` on a raw filter (a mapping) evaluates its operators literally, the way
  ``_satisfied`` in analysis/metrics.py does: a missing or null attribute fails every operator
  (``ne`` included); two sides compare as doubles when both are numbers (module
  :mod:`.values` says precisely what is a number), otherwise as texts in code-point order;
  ``in`` is "some element equal", ``prefix`` is ``text(x).startswith(text(p))``.
* :func:`matches` on a :class:`Conjunction` tests membership in its *normal form*, where a value
  is looked up in the numbers part if it is a number and in the strings part (by its text)
  otherwise. The two agree on every value whose kind is the kind of the operands of its
  attribute's ``lt le gt ge`` operators, with ``prefix`` (other than ``prefix ""``) counting as
  a string operator. That is the spec's single-kind rule ("Workloads must keep each attribute
  single-kind"): across kinds the literal matcher compares a number's text with a string,
  which no interval over numbers or strings can describe.

**Normal form** (spec §4 "Normal form"). Per attribute, a :class:`Constraint` holds a numbers
part and a strings part, each a finite set or an interval minus finitely many points
(module :mod:`.sets`). Atoms map to parts by the spec's table: ``eq``/``in`` give their values
of each kind; ``ne a`` gives everything minus ``a`` in ``a``'s kind and everything in the other
kind; an ordering operator gives an interval of its operand's kind only; ``prefix p`` gives the
strings [p, inc(p)) (inc drops trailing U+10FFFF and increments the last code point) and no
numbers, except that ``prefix ""`` is "present": every number and every string. Operators on
one attribute intersect; a conjunction with an empty constraint is unsatisfiable.

A :class:`Conjunction` is built only from constraints that one operator object can express
(:func:`_express`), and its canonical text is the sorted-keys JSON of that object
(:func:`canonical_text`). So text and conjunction determine each other, equality and hashing
use the text, and :func:`to_filter` gives back a filter with the same meaning.

**Covering** (spec §4 "Covering"; Terpstra et al. §2.1 "covering routing strategy"): part by part,
V₁ ⊇ V₂ if V₂ is empty, or finite and inside V₁, or both are intervals minus points with
I₁ ⊇ I₂ and E₁ ∩ I₂ ⊆ E₂. A conjunction F₁ covers F₂ when F₂ is unsatisfiable or every attribute
of F₁ is constrained in F₂ and covered there (a missing attribute fails, so fewer attributes is
wider). A disjunction covers another when each conjunction of the second is covered by one of
the first: sufficient, not exact.

**Perfect merge** (spec §4 "Perfect merge"; Terpstra et al. §2.1): two conjunctions constraining the
same attributes and differing on one become one when the union of that constraint is again
expressible: ``eq/in ∪ eq/in → in``, touching intervals → hull, a hull with one missing open
point → hull + ``ne``, interval ∪ its open ends → closed ends, and the unions of everything
(``lt a ∪ ge a``, ``ne a ∪ eq a``, ``ne a ∪ ne b``, ...) → ``{"prefix": ""}``. Where the union is
every number and no string, "present" is used: exact for a single-kind attribute.

**Imperfect merge** (spec §4 "Imperfect merge"): :func:`upper_bound` keeps the shared
attributes, each as the exact union when expressible, else as in-union, interval hull, longest
common string prefix (too many strings for ``max_in``) or "present". Only false positives result.

**Reduction** (spec §4 "Edge filter"): :func:`reduce` turns a disjunction into the canonical
edge filter: (1) drop unsatisfiable conjunctions, (2) drop covered ones, keeping the first of
mutual covers, (3) perfect merges until none applies (each merge result is again checked for
covering), (4) with ``bound``, the size bound: oversized ``in`` lists are hulled, then the
cheapest pair is replaced by its upper bound until at most ``max_conj`` remain. The result is
sorted by canonical text, so "unchanged" means equal tuples, and reducing twice changes nothing.

**Topics** (spec §4 "Topics"): a subscription is filter ∪ {"$topic": topic} (:func:`with_topic`)
and a publication matches on attributes ∪ {"$topic": topic} (:func:`publication_attributes`).
Note that the literal matcher reads a topic such as ``"5"`` as a number (equal to ``"5.0"``);
the analysis compares topics as plain strings, so numeric-looking topic names are to be avoided.

Everything is pure, deterministic and free of I/O (sans-IO, docs/design.md). Conjunctions cache
their canonical text and hash, and :func:`covers` is memoized on them.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeAlias

from pubmesh.proto.content import sets
from pubmesh.proto.content.sets import KindSet, Points, Span
from pubmesh.proto.content.values import is_scalar, number_key, number_of, text_of

__all__ = [
    "MAINTENANCE_HULL",
    "OPERATORS",
    "PRESENT",
    "TOPIC",
    "Conjunction",
    "Constraint",
    "Disjunction",
    "FilterError",
    "Reducer",
    "canonical_text",
    "covers",
    "covers_any",
    "disjunction_covers",
    "inc",
    "is_satisfiable",
    "maintenance_topic",
    "matches",
    "perfect_merge",
    "publication_attributes",
    "reduce",
    "reducer",
    "to_filter",
    "upper_bound",
    "validate",
    "with_topic",
]

OPERATORS = ("eq", "ne", "lt", "le", "gt", "ge", "prefix", "in")
TOPIC = "$topic"
#: examples for error messages (and the shell's help)
EXAMPLE_FILTER = '{"symbol": "s3", "price": {"lt": 100}}'
EXAMPLE_ATTRIBUTES = '{"symbol": "s3", "price": 99.5}'

#: At most this many conjunctions per maintenance topic survive the bound (spec §4).
MAINTENANCE_HULL = 4
_MAX_CODE_POINT = "\U0010ffff"
_SAFE_INTEGER = 2**53
#: The "present" constraint (every value of every kind) as an operator object.
PRESENT: Mapping[str, Any] = {"prefix": ""}


class FilterError(ValueError):
    """A filter the analysis would misread or the spec rejects at Subscribe."""


# --------------------------------------------------------------------------------------------
# Parsing: operands and operators, as the analysis reads them
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Operand:
    number: float | None  # the double the analysis reads, None when not a number
    text: str  # the text the analysis compares otherwise


@dataclass(frozen=True, slots=True)
class _Atom:
    op: str
    operands: tuple[_Operand, ...]  # one, except for ``in``


_Parsed: TypeAlias = tuple[tuple[str, tuple[_Atom, ...]], ...]


def _operand(attr: str, op: str, value: Any) -> _Operand:
    where = f"filter attribute {attr!r}, operator {op!r}"
    if value is None or not is_scalar(value):
        raise FilterError(f"{where}: operand {value!r} must be a string, number or boolean")
    number = number_of(value)
    if number is not None and not math.isfinite(number):
        raise FilterError(f"{where}: operand {value!r} reads as a non-finite number")
    return _Operand(number, text_of(value))


def _parse_constraint(attr: str, constraint: Any) -> tuple[_Atom, ...]:
    if not isinstance(constraint, Mapping):
        if isinstance(constraint, str) and constraint.startswith("{"):
            raise FilterError(
                f"filter attribute {attr!r}: a bare string starting with '{{' is read as an "
                'operator object by the analysis; write {"eq": ...}'
            )
        if isinstance(constraint, list | tuple):
            raise FilterError(f'filter attribute {attr!r}: a bare list; write {{"in": [...]}}')
        return (_Atom("eq", (_operand(attr, "eq", constraint),)),)
    if not constraint:
        raise FilterError(f"filter attribute {attr!r}: an empty constraint {{}}")
    atoms = []
    for op, value in sorted(constraint.items(), key=lambda kv: str(kv[0])):
        if op not in OPERATORS:
            raise FilterError(
                f"filter attribute {attr!r}: unknown operator {op!r} "
                f"(expected one of {', '.join(OPERATORS)})"
            )
        if op == "in":
            if not isinstance(value, list | tuple):
                raise FilterError(f"filter attribute {attr!r}: 'in' needs a list, got {value!r}")
            atoms.append(_Atom("in", tuple(_operand(attr, "in", v) for v in value)))
        else:
            atoms.append(_Atom(op, (_operand(attr, op, value),)))
    return tuple(atoms)


def _parse(filter: Mapping[str, Any], *, allow_reserved: bool) -> _Parsed:
    if not isinstance(filter, Mapping):
        raise FilterError(f"a filter must be a JSON object, got {type(filter).__name__}")
    parsed = []
    for attr, constraint in filter.items():
        if not isinstance(attr, str):
            raise FilterError(f"filter attribute {attr!r}: names must be strings")
        if attr.startswith("$") and not allow_reserved:
            raise FilterError(f"filter attribute {attr!r}: names starting with '$' are reserved")
        parsed.append((attr, _parse_constraint(attr, constraint)))
    return tuple(sorted(parsed, key=lambda item: item[0]))


# --------------------------------------------------------------------------------------------
# Literal matching (the analysis's _satisfied)
# --------------------------------------------------------------------------------------------
def _compare(op: str, x_number: float | None, x_text: str, operand: _Operand) -> bool:
    if x_number is not None and operand.number is not None:
        a: Any = number_key(x_number)
        b: Any = number_key(operand.number)
    else:
        a, b = x_text, operand.text
    if op == "eq":
        return bool(a == b)
    if op == "ne":
        return bool(a != b)
    if op == "lt":
        return bool(a < b)
    if op == "le":
        return bool(a <= b)
    if op == "gt":
        return bool(a > b)
    return bool(a >= b)  # ge


def _atom_holds(atom: _Atom, x_number: float | None, x_text: str) -> bool:
    if atom.op == "prefix":
        return x_text.startswith(atom.operands[0].text)
    if atom.op == "in":
        return any(_compare("eq", x_number, x_text, o) for o in atom.operands)
    return _compare(atom.op, x_number, x_text, atom.operands[0])


def _literal_matches(parsed: _Parsed, attributes: Mapping[str, Any]) -> bool:
    for attr, atoms in parsed:
        x = attributes.get(attr)
        if x is None:
            return False
        x_number, x_text = number_of(x), text_of(x)
        if not all(_atom_holds(atom, x_number, x_text) for atom in atoms):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Normal form
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Constraint:
    """The values one attribute may take: a numbers part and a strings part (by text)."""

    num: KindSet[float]
    text: KindSet[str]


_NO_NUM: Points[float] = Points(frozenset())
_NO_TEXT: Points[str] = Points(frozenset())
_ALL_NUM: Span[float] = Span(None, False, None, False, frozenset())
_ALL_TEXT: Span[str] = Span("", True, None, False, frozenset())
_PRESENT = Constraint(_ALL_NUM, _ALL_TEXT)


def inc(prefix: str) -> str | None:
    """The least string above every string starting with ``prefix`` (None: unbounded)."""
    stripped = prefix.rstrip(_MAX_CODE_POINT)
    if not stripped:
        return None
    return stripped[:-1] + chr(ord(stripped[-1]) + 1)


def _prefix_set(p: str) -> KindSet[str]:
    return sets.span(p, True, inc(p), False)


def _atom_constraint(atom: _Atom) -> Constraint:
    if atom.op in ("eq", "in"):
        nums = [o.number for o in atom.operands if o.number is not None]
        texts = [o.text for o in atom.operands if o.number is None]
        return Constraint(sets.points(nums), sets.points(texts))
    (operand,) = atom.operands
    a, t = operand.number, operand.text
    if atom.op == "ne":
        if a is not None:
            return Constraint(sets.span(None, False, None, False, (a,)), _ALL_TEXT)
        return Constraint(_ALL_NUM, sets.span("", True, None, False, (t,)))
    if atom.op == "prefix":
        return _PRESENT if t == "" else Constraint(_NO_NUM, _prefix_set(t))
    lower, closed = atom.op in ("gt", "ge"), atom.op in ("le", "ge")
    if a is not None:
        bounds = (a, closed, None, False) if lower else (None, False, a, closed)
        return Constraint(sets.span(*bounds), _NO_TEXT)
    text_bounds = (t, closed, None, False) if lower else ("", True, t, closed)
    return Constraint(_NO_NUM, sets.span(*text_bounds))


def _intersect(a: Constraint, b: Constraint) -> Constraint:
    return Constraint(sets.intersect(a.num, b.num), sets.intersect(a.text, b.text))


def _constraint_of(atoms: Iterable[_Atom]) -> Constraint:
    result = _PRESENT
    for atom in atoms:
        result = _intersect(result, _atom_constraint(atom))
    return result


def _empty(c: Constraint) -> bool:
    return sets.is_empty(c.num) and sets.is_empty(c.text)


def _num_json(x: float) -> int | float:
    """A number as written in filters: an int when it is one (and exact as a double)."""
    return int(x) if x.is_integer() and abs(x) <= _SAFE_INTEGER else x


def _full_minus_num(v: KindSet[float]) -> frozenset[float] | None:
    if isinstance(v, Span) and v.lo is None and v.hi is None:
        return v.holes
    return None


def _full_minus_text(v: KindSet[str]) -> frozenset[str] | None:
    if isinstance(v, Span) and v.lo == "" and v.hi is None:
        return v.holes if v.lo_closed else v.holes | {""}
    return None


def _bound_ops(v: Span[Any], to_json: Callable[[Any], Any]) -> dict[str, Any]:
    ops: dict[str, Any] = {}
    if v.lo is not None:
        ops["ge" if v.lo_closed else "gt"] = to_json(v.lo)
    if v.hi is not None:
        ops["le" if v.hi_closed else "lt"] = to_json(v.hi)
    return ops


def _express(c: Constraint) -> Any:
    """One operator object (or bare value) meaning ``c``; None when there is none."""
    num, text = c.num, c.text
    if isinstance(num, Points) and isinstance(text, Points):
        values: list[Any] = [_num_json(x) for x in sorted(num.values)] + sorted(text.values)
        if len(values) == 1:
            (value,) = values
            return {"eq": value} if isinstance(value, str) and value.startswith("{") else value
        return {"in": values}
    if sets.is_empty(text):
        assert isinstance(num, Span)
        if (num.lo is None and num.hi is None) or len(num.holes) > 1:
            return None
        ops = _bound_ops(num, _num_json)
        if num.holes:
            ops["ne"] = _num_json(next(iter(num.holes)))
        return ops
    if sets.is_empty(num):
        assert isinstance(text, Span)
        if len(text.holes) > 1:
            return None
        if text.lo and text.lo_closed and not text.hi_closed and text.hi == inc(text.lo):
            ops = {"prefix": text.lo}
        else:
            ops = _bound_ops(text, str)
        if text.holes:
            ops["ne"] = next(iter(text.holes))
        return ops
    num_holes, text_holes = _full_minus_num(num), _full_minus_text(text)
    if num_holes is None or text_holes is None or len(num_holes) + len(text_holes) > 1:
        return None
    if num_holes:
        return {"ne": _num_json(next(iter(num_holes)))}
    if text_holes:
        return {"ne": next(iter(text_holes))}
    return {"prefix": ""}


def _in_count(c: Constraint) -> int:
    if isinstance(c.num, Points) and isinstance(c.text, Points):
        return len(c.num.values) + len(c.text.values)
    return 0


# --------------------------------------------------------------------------------------------
# Conjunctions
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class Conjunction:
    """A canonical conjunction: attribute → :class:`Constraint`, sorted by attribute.

    Build one with :func:`validate` or :func:`with_topic`. Equality, hashing and order go by
    :attr:`text`, the canonical JSON text of the filter it stands for."""

    items: tuple[tuple[str, Constraint], ...]
    text: str = field(repr=False)
    names: frozenset[str] = field(repr=False)
    satisfiable: bool = field(repr=False)
    by_name: Mapping[str, Constraint] = field(repr=False)
    _hash: int = field(repr=False)
    #: the reduction's indexes, computed on first use (:func:`_topic_points`, :func:`_rest`)
    _topics: frozenset[str] | bool | None = field(default=False, init=False, repr=False)
    _rests: dict[str, str] | None = field(default=None, init=False, repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Conjunction) and self.text == other.text

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: Conjunction) -> bool:
        return self.text < other.text

    def __repr__(self) -> str:
        return f"Conjunction({self.text})"


def _conjunction(items: Iterable[tuple[str, Constraint]]) -> Conjunction:
    ordered = tuple(sorted(items, key=lambda item: item[0]))
    expressed = {}
    for attr, c in ordered:
        e = _express(c)
        if e is None:
            raise AssertionError(f"inexpressible constraint on {attr!r}: {c!r}")
        expressed[attr] = e
    text = json.dumps(expressed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return Conjunction(
        items=ordered,
        text=text,
        names=frozenset(attr for attr, _ in ordered),
        satisfiable=not any(_empty(c) for _, c in ordered),
        by_name=dict(ordered),
        _hash=hash(text),
    )


@lru_cache(maxsize=1 << 16)
def _canonical(c: Constraint) -> Constraint | None:
    """The constraint its own expression parses back to, or None if inexpressible."""
    e = _express(c)
    return None if e is None else _constraint_of(_parse_constraint("", e))


Disjunction: TypeAlias = tuple[Conjunction, ...]


def validate(filter: Mapping[str, Any], *, allow_reserved: bool = False) -> Conjunction:
    """The canonical conjunction of a JSON filter; :class:`FilterError` names the attribute
    of the first problem. ``allow_reserved`` admits ``$`` attributes (maintenance)."""
    parsed = _parse(filter, allow_reserved=allow_reserved)
    items = []
    for attr, atoms in parsed:
        canonical = _canonical(_constraint_of(atoms))
        assert canonical is not None  # one operator object always has an expression
        items.append((attr, canonical))
    return _conjunction(items)


def brief_json(value: Any) -> str:
    """``value`` as its JSON text, cut to 60 characters (for error messages)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def topic_based(stack: str, what: str) -> str:
    """The one line that refuses ``what`` (filters, attributes) on topic-based ``stack``."""
    return (
        f"stack {stack} is topic-based: {what} need a content-based stack such as chord or "
        "brokertree"
    )


def filter_problem(filter: object) -> str | None:
    """Why ``filter`` cannot be a subscription's filter, in one line; None if it can. The one
    check every entry point makes (the API, the shell, the JSON control channel, scenario
    files), so that each refuses the same filters with the same words."""
    if not isinstance(filter, Mapping):
        return f"filter must be a JSON object such as {EXAMPLE_FILTER}, got {brief_json(filter)}"
    try:
        validate(filter)
    except (FilterError, TypeError, ValueError, RecursionError) as error:
        return str(error)
    return None


def attributes_problem(attributes: object) -> str | None:
    """Why ``attributes`` cannot be a publication's, in one line; None if they can: names are
    strings not starting with ``$`` (reserved for the stacks' own), values strings or finite
    numbers (what filters compare)."""
    if not isinstance(attributes, Mapping):
        return (
            f"attributes must be a JSON object such as {EXAMPLE_ATTRIBUTES}, "
            f"got {brief_json(attributes)}"
        )
    for name, value in attributes.items():
        if not isinstance(name, str) or name.startswith("$"):
            return f"attribute {brief_json(name)}: names starting with '$' are reserved"
        if (
            isinstance(value, bool)
            or not isinstance(value, str | int | float)
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            return (
                f"attribute {brief_json(name)} must be a string or a (finite) number, "
                f"got {brief_json(value)}"
            )
    return None


def canonical_text(conj: Conjunction) -> str:
    """The sorted-keys compact JSON text of ``conj``'s filter (used for order and ties)."""
    return conj.text


def to_filter(conj: Conjunction) -> dict[str, Any]:
    """A fresh JSON filter meaning ``conj`` (``validate(to_filter(c)) == c``)."""
    result: dict[str, Any] = json.loads(conj.text)
    return result


def with_topic(filter: Mapping[str, Any] | Conjunction, topic: str | None) -> Conjunction:
    """A subscription's conjunction: filter ∪ {"$topic": topic} (no topic: the filter)."""
    conj = filter if isinstance(filter, Conjunction) else validate(filter)
    if topic is None:
        return conj
    topic_constraint = _constraint_of(_parse_constraint(TOPIC, {"eq": topic}))
    rest = [(attr, c) for attr, c in conj.items if attr != TOPIC]
    return _conjunction([*rest, (TOPIC, topic_constraint)])


def publication_attributes(
    attributes: Mapping[str, Any] | None, topic: str | None
) -> dict[str, Any]:
    """What a publication is matched on: its attributes without ``$`` names, plus $topic."""
    result = {k: v for k, v in (attributes or {}).items() if not k.startswith("$")}
    if topic is not None:
        result[TOPIC] = topic
    return result


def is_satisfiable(conj: Conjunction) -> bool:
    """Does some attribute assignment match? (False when a constraint admits no value.)"""
    return conj.satisfiable


def _admits(c: Constraint, x: Any) -> bool:
    number = number_of(x)
    if number is None:
        return sets.contains(c.text, text_of(x))
    if math.isnan(number):  # above every bound (Spark): only an unbounded-above interval
        return isinstance(c.num, Span) and c.num.hi is None
    return sets.contains(c.num, number)


def matches(filter: Conjunction | Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    """Does a publication with ``attributes`` match? A mapping is validated (``$`` names
    allowed) and evaluated literally, as the analysis does; a :class:`Conjunction` by its
    normal form (the module doc says where the two can differ)."""
    if isinstance(filter, Conjunction):
        for attr, c in filter.items:
            x = attributes.get(attr)
            if x is None or not _admits(c, x):
                return False
        return True
    return _literal_matches(_parse(filter, allow_reserved=True), attributes)


#: a publication attribute read once for matching: its number (None if not a number) and, only
#: when it is not one, its text (what :func:`_admits` compares; "" otherwise)
Prepared = Mapping[str, tuple[float | None, str]]


def prepare(attributes: Mapping[str, Any]) -> dict[str, tuple[float | None, str]]:
    """``attributes`` read once for :func:`matches_prepared`: a node that matches one
    publication against many conjunctions parses each value once instead of once per
    conjunction (the same answers as :func:`matches`)."""
    out: dict[str, tuple[float | None, str]] = {}
    for attr, x in attributes.items():
        if x is None:
            continue
        number = number_of(x)
        out[attr] = (number, text_of(x) if number is None else "")
    return out


def matches_prepared(conj: Conjunction, prepared: Prepared) -> bool:
    """:func:`matches` of a conjunction over attributes read by :func:`prepare`."""
    for attr, c in conj.items:
        value = prepared.get(attr)
        if value is None:
            return False
        number, text = value
        if number is None:
            if not sets.contains(c.text, text):
                return False
        elif number != number:  # NaN: above every bound (Spark)
            if not (isinstance(c.num, Span) and c.num.hi is None):
                return False
        elif not sets.contains(c.num, number):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Covering
# --------------------------------------------------------------------------------------------
def _constraint_covers(a: Constraint, b: Constraint) -> bool:
    return sets.covers(a.num, b.num) and sets.covers(a.text, b.text)


@lru_cache(maxsize=1 << 16)
def _covers(a: Conjunction, b: Conjunction) -> bool:
    return all(_constraint_covers(c, b.by_name[attr]) for attr, c in a.items)


def covers(a: Conjunction, b: Conjunction) -> bool:
    """a ⊒ b: every publication matching b matches a (spec §4 "Covering"; sound for
    single-kind attributes, and not exact: a False may still be a cover)."""
    if a is b or not b.satisfiable:
        return True
    if not a.names <= b.names:
        return False
    return _covers(a, b)


def covers_any(disjunction: Iterable[Conjunction], conj: Conjunction) -> bool:
    """Is ``conj`` covered by some conjunction of ``disjunction``?"""
    return any(covers(c, conj) for c in disjunction)


def disjunction_covers(d1: Iterable[Conjunction], d2: Iterable[Conjunction]) -> bool:
    """D₁ ⊒ D₂ if each conjunction of D₂ is covered by one of D₁ (sufficient, not exact)."""
    first = tuple(d1)
    return all(covers_any(first, c) for c in d2)


# --------------------------------------------------------------------------------------------
# Merging
# --------------------------------------------------------------------------------------------
def _widen(c: Constraint) -> Constraint:
    """Every number (minus points) and no string → also every string: the same set on a
    single-kind numeric attribute, and expressible ("lt a ∪ ge a → present", spec §4)."""
    if sets.is_empty(c.text) and _full_minus_num(c.num) is not None:
        return Constraint(c.num, _ALL_TEXT)
    return c


def _union(a: Constraint, b: Constraint, max_in: int | None) -> Constraint | None:
    """a ∪ b as an expressible constraint (with ≤ max_in in-values), or None."""
    num, text = sets.union(a.num, b.num), sets.union(a.text, b.text)
    if num is None or text is None:
        return None
    merged = _canonical(_widen(Constraint(num, text)))
    if merged is None or (max_in is not None and _in_count(merged) > max_in):
        return None
    return merged


def _differing(a: Conjunction, b: Conjunction) -> list[str]:
    return [attr for attr, c in a.items if b.by_name[attr] != c]


@lru_cache(maxsize=1 << 18)
def _perfect_merge(a: Conjunction, b: Conjunction, max_in: int | None) -> Conjunction | None:
    """Memoized like :func:`covers`: a filter wave merges the same pairs at every node."""
    if a.names != b.names:
        return None
    differing = _differing(a, b)
    if not differing:
        return a
    if len(differing) != 1:
        return None
    (attr,) = differing
    merged = _union(a.by_name[attr], b.by_name[attr], max_in)
    if merged is None:
        return None
    return _conjunction((x, merged if x == attr else c) for x, c in a.items)


def perfect_merge(a: Conjunction, b: Conjunction) -> Conjunction | None:
    """One conjunction matching exactly what a or b matches, when a and b constrain the same
    attributes, differ on one, and its union is expressible (spec §4 "Perfect merge")."""
    return _perfect_merge(a, b, None)


def _common_prefix(texts: Iterable[str]) -> str:
    ordered = sorted(texts)
    first, last = ordered[0], ordered[-1]
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _constraint_bound(a: Constraint, b: Constraint, max_in: int) -> Constraint:
    """The least wide expressible constraint ⊇ a ∪ b among: the exact union, in-union,
    interval hull, longest common prefix (strings beyond max_in), "present"."""
    exact = _union(a, b, max_in)
    if exact is not None:
        return exact
    num = sets.union(a.num, b.num)
    if not (isinstance(num, Points) and len(num.values) <= max_in):
        num = sets.hull(a.num, b.num)
    text = sets.union(a.text, b.text)
    if isinstance(text, Points) and len(text.values) > max_in:
        text = _prefix_set(_common_prefix(text.values))
    elif not isinstance(text, Points):
        text = sets.hull(a.text, b.text)
    bounded = _canonical(_widen(Constraint(num, text)))
    if bounded is None or _in_count(bounded) > max_in:
        return _PRESENT
    return bounded


def upper_bound(a: Conjunction, b: Conjunction, *, max_in: int = 64) -> Conjunction:
    """An imperfect merge: one conjunction matching everything a or b matches, on their
    shared attributes only (spec §4 "Imperfect merge"; Terpstra et al. §2.1)."""
    return _upper_bound(a, b, max_in)


@lru_cache(maxsize=1 << 16)
def _upper_bound(a: Conjunction, b: Conjunction, max_in: int) -> Conjunction:
    """Memoized like :func:`covers`: the maintenance hull bounds the same pairs at every node
    of a filter wave."""
    shared = sorted(a.names & b.names)
    return _conjunction((x, _constraint_bound(a.by_name[x], b.by_name[x], max_in)) for x in shared)


def _shrink(conj: Conjunction, max_in: int) -> Conjunction:
    """``conj`` with every in-list longer than ``max_in`` replaced by its hull."""
    if all(_in_count(c) <= max_in for _, c in conj.items):
        return conj
    return _conjunction(
        (x, _constraint_bound(c, c, max_in) if _in_count(c) > max_in else c) for x, c in conj.items
    )


# --------------------------------------------------------------------------------------------
# Reduction
# --------------------------------------------------------------------------------------------
def _topic_points(conj: Conjunction) -> frozenset[str] | None:
    """The topics ``conj`` is restricted to, if its ``$topic`` constraint is a finite set of
    strings (every subscription's is); None otherwise. Cached on the conjunction."""
    found = conj._topics
    if found is False:
        c = conj.by_name.get(TOPIC)
        if c is None or not sets.is_empty(c.num) or not isinstance(c.text, Points):
            found = None
        else:
            found = c.text.values
        object.__setattr__(conj, "_topics", found)
    return found  # type: ignore[return-value]


def _rest(conj: Conjunction, attr: str) -> str:
    """``conj`` without its constraint on ``attr``, as canonical text: two conjunctions on the
    same attributes that differ on ``attr`` only share it (equal constraints have equal
    expressions). Cached on the conjunction; a string hashes once."""
    rests = conj._rests
    if rests is None:
        whole = json.loads(conj.text)
        rests = {
            a: json.dumps(
                {k: v for k, v in whole.items() if k != a},
                sort_keys=True,
                separators=(",", ":"),
                ensure_ascii=False,
            )
            for a in whole
        }
        object.__setattr__(conj, "_rests", rests)
    return rests[attr]


class _Group:
    """The members of a :class:`_Pool` that constrain one set of attributes, in insertion
    order, indexed by topic (for covering) and by everything but one attribute (for merging)."""

    def __init__(self) -> None:
        self.members: dict[Conjunction, int] = {}
        self.by_topic: dict[str, dict[Conjunction, None]] = {}
        self.wide: dict[Conjunction, None] = {}
        self.by_rest: dict[str, set[Conjunction]] = {}

    def add(self, conj: Conjunction, seq: int) -> None:
        self.members[conj] = seq
        topics = _topic_points(conj)
        if topics is None:
            self.wide[conj] = None
        for topic in topics or ():
            self.by_topic.setdefault(topic, {})[conj] = None
        for attr in conj.names:
            self.by_rest.setdefault(_rest(conj, attr), set()).add(conj)

    def discard(self, conj: Conjunction) -> None:
        del self.members[conj]
        topics = _topic_points(conj)
        if topics is None:
            del self.wide[conj]
        for topic in topics or ():
            del self.by_topic[topic][conj]
        for attr in conj.names:
            self.by_rest[_rest(conj, attr)].discard(conj)

    def copy(self) -> _Group:
        """An independent copy (empty index entries left behind by removals are not kept)."""
        new = _Group.__new__(_Group)
        new.members = dict(self.members)
        new.by_topic = {t: dict(d) for t, d in self.by_topic.items() if d}
        new.wide = dict(self.wide)
        new.by_rest = {k: set(s) for k, s in self.by_rest.items() if s}
        return new

    def covering(self, conj: Conjunction) -> Iterable[Conjunction]:
        """Members that may cover ``conj``: those admitting one of its topics, and the wide."""
        topics = _topic_points(conj)
        if not topics:
            return self.members
        return (*self.by_topic.get(next(iter(topics)), ()), *self.wide)

    def covered(self, conj: Conjunction) -> Iterable[Conjunction]:
        """Members that ``conj`` may cover: those on its topics only, and the wide."""
        topics = _topic_points(conj)
        if topics is None:
            return self.members
        found = dict.fromkeys(self.wide)
        for topic in topics:
            found.update(self.by_topic.get(topic, {}))
        return found

    def mergeable(self, conj: Conjunction) -> list[Conjunction]:
        """Members on the same attributes differing from ``conj`` on at most one, in insertion
        order."""
        found: set[Conjunction] = set()
        for attr in conj.names:
            found |= self.by_rest.get(_rest(conj, attr), set())
        return sorted(found, key=self.members.__getitem__)


class _Pool:
    """A covering-free, perfect-merge-free set of conjunctions, grown one at a time.

    Members are grouped by the attributes they constrain (a conjunction only covers one whose
    attributes include its own, and only merges perfectly with one on the same attributes),
    and each group is indexed by topic and by "all but one attribute" (:class:`_Group`), so a
    test visits the members that can answer it instead of the whole pool. A merge picks the
    earliest inserted candidate, as a scan of the pool in insertion order would."""

    def __init__(self, max_in: int | None, merge: bool = True) -> None:
        self.groups: dict[frozenset[str], _Group] = {}
        self.max_in = max_in
        self.merge = merge
        self.seq = 0

    @property
    def alive(self) -> list[Conjunction]:
        return [conj for group in self.groups.values() for conj in group.members]

    def __len__(self) -> int:
        return sum(len(group.members) for group in self.groups.values())

    def copy(self) -> _Pool:
        """An independent copy: inserting into it continues the same sequence of inserts."""
        new = _Pool.__new__(_Pool)
        new.groups = {names: group.copy() for names, group in self.groups.items()}
        new.max_in, new.merge, new.seq = self.max_in, self.merge, self.seq
        return new

    def remove(self, conj: Conjunction) -> None:
        group = self.groups[conj.names]
        group.discard(conj)
        if not group.members:
            del self.groups[conj.names]

    def insert(self, conj: Conjunction) -> Conjunction | None:
        """Add ``conj``: drop it if covered, drop what it covers, merge it perfectly while
        possible. Returns what was finally added (None if nothing was)."""
        while True:
            if not conj.satisfiable and self.groups:
                return None  # covered by anything (covers)
            names = conj.names
            same = self.groups.get(names)
            if same is not None and conj in same.members:
                return None  # a member equal to it covers it: the scan below would say so
            for other, group in self.groups.items():
                if other <= names and any(covers(k, conj) for k in group.covering(conj)):
                    return None
            for other in [o for o in self.groups if names <= o]:
                group = self.groups[other]
                for k in [k for k in group.covered(conj) if covers(conj, k)]:
                    self.remove(k)
            same = self.groups.get(names) if self.merge else None
            for k in same.mergeable(conj) if same is not None else ():
                merged = _perfect_merge(k, conj, self.max_in)
                if merged is not None:
                    self.remove(k)
                    conj = merged
                    break
            else:
                self.seq += 1
                self.groups.setdefault(names, _Group()).add(conj, self.seq)
                return conj


def maintenance_topic(conj: Conjunction) -> str | None:
    """The maintenance topic ($-named, spec §7) ``conj`` is restricted to, if any."""
    topics = _topic_points(conj)
    if topics is None or len(topics) != 1:
        return None
    (topic,) = topics
    return topic if topic.startswith("$") else None


def _cost(a: Conjunction, b: Conjunction) -> tuple[int, int, str, str]:
    """Attributes dropped, then constraints widened, then the texts (spec §4)."""
    dropped = len(a.names ^ b.names)
    widened = sum(1 for x in a.names & b.names if a.by_name[x] != b.by_name[x])
    first, second = (a, b) if a.text <= b.text else (b, a)
    return (dropped, widened, first.text, second.text)


def _merge_cheapest(pool: _Pool, group: Sequence[Conjunction], target: int, max_in: int) -> None:
    """Replace the cheapest pair of ``group`` (members of the pool) by its upper bound until
    at most ``target`` members are left (or no pair is)."""
    members = set(group)
    heap = [(_cost(a, b), a, b) for i, a in enumerate(group) for b in group[i + 1 :]]
    heapq.heapify(heap)
    while len(members) > target and heap:
        _, a, b = heapq.heappop(heap)
        if a not in members or b not in members:
            continue  # a stale pair
        pool.remove(a)
        pool.remove(b)
        added = pool.insert(upper_bound(a, b, max_in=max_in))
        members &= set(pool.alive)
        if added is not None:
            members.discard(added)
            for other in sorted(members):
                heapq.heappush(heap, (_cost(added, other), added, other))
            members.add(added)


def reduce(
    disjunction: Iterable[Conjunction],
    *,
    max_conj: int = 128,
    max_in: int = 64,
    bound: bool = True,
    merge: bool = True,
    hull_maintenance: bool = False,
) -> Disjunction:
    """The canonical edge filter of a disjunction (spec §4 "Edge filter" steps 1–4).

    Without ``bound`` (the loopback, spec §4 "Loopback") the union of what is matched is
    preserved exactly; with it, the result has at most ``max_conj`` conjunctions and no
    in-list longer than ``max_in``, and matches a superset. Without ``merge`` only steps 1–2
    run (Rebeca's *covering* routing, Terpstra et al. §2.1; ``bound`` is then ignored): the result
    matches exactly what the input matches. With ``hull_maintenance`` (and ``bound``) every
    maintenance topic is hulled to :data:`MAINTENANCE_HULL` conjunctions whatever the total
    (see the chord stack's :mod:`pubmesh.proto.chord.routing`). Sorted by canonical text."""
    return _reduce(tuple(disjunction), *_settings(max_conj, max_in, bound, merge, hull_maintenance))


def _settings(
    max_conj: int, max_in: int, bound: bool, merge: bool, hull_maintenance: bool
) -> tuple[int, int, bool, bool, bool]:
    """:func:`reduce`'s keyword arguments checked and resolved as the reduction uses them:
    (max_conj, max_in, bound, merge, hull), bounding only when merging, hulling only when
    bounding."""
    if max_conj < 1 or max_in < 1:
        raise ValueError("max_conj and max_in must be positive")
    bounded = bound and merge
    return max_conj, max_in, bounded, merge, bounded and hull_maintenance


@lru_cache(maxsize=1 << 14)
def _reduce(
    disjunction: tuple[Conjunction, ...],
    max_conj: int,
    max_in: int,
    bound: bool,
    merge: bool,
    hull: bool,
) -> Disjunction:
    """:func:`reduce`, memoized on its input: the nodes of a filter wave reduce the same
    unions over and over (conjunctions hash by their cached text)."""
    reducer = Reducer(max_conj=max_conj, max_in=max_in, bound=bound, merge=merge, hull=hull)
    reducer.extend(disjunction)
    return reducer.result()


class Reducer:
    """:func:`reduce` one part at a time, for unions that share a prefix.

    ``Reducer(...)`` followed by :meth:`extend` with the parts of a disjunction in order and
    :meth:`result` gives exactly ``reduce`` of their concatenation (same arguments; ``bound``
    and ``hull`` as :func:`reduce` resolves them): steps 1–3 insert each conjunction into the
    pool in input order, and step 4 runs on a copy when the result is asked for. A
    :meth:`copy` taken after some parts continues from there, so the reductions of
    ``A + B₁`` and ``A + B₂`` insert A once (the chord stack's union filters h for nested
    ranges, Terpstra et al. §4.4, are such prefixes)."""

    __slots__ = ("bound", "hull", "max_conj", "max_in", "pool")

    def __init__(self, *, max_conj: int, max_in: int, bound: bool, merge: bool, hull: bool) -> None:
        self.pool = _Pool(max_in if bound else None, merge)
        self.max_conj, self.max_in, self.bound, self.hull = max_conj, max_in, bound, hull

    def copy(self) -> Reducer:
        new = Reducer.__new__(Reducer)
        new.pool = self.pool.copy()
        new.max_conj, new.max_in, new.bound, new.hull = (
            self.max_conj,
            self.max_in,
            self.bound,
            self.hull,
        )
        return new

    def extend(self, conjunctions: Iterable[Conjunction]) -> None:
        """Steps 1–3 for each conjunction, in order."""
        pool, bound, max_in = self.pool, self.bound, self.max_in
        for conj in conjunctions:
            if conj.satisfiable:  # step 1
                pool.insert(_shrink(conj, max_in) if bound else conj)  # steps 2-3

    def result(self) -> Disjunction:
        """Step 4 (on a copy, so more parts may still be added) and the canonical order."""
        pool, max_conj, max_in = self.pool, self.max_conj, self.max_in
        if self.bound and (self.hull or len(pool) > max_conj):  # step 4
            pool = pool.copy()
            by_topic: dict[str, list[Conjunction]] = {}
            for conj in pool.alive:
                topic = maintenance_topic(conj)
                if topic is not None:
                    by_topic.setdefault(topic, []).append(conj)
            for topic in sorted(by_topic):
                group = sorted(by_topic[topic])
                if len(group) > MAINTENANCE_HULL:
                    _merge_cheapest(pool, group, MAINTENANCE_HULL, max_in)
            if len(pool) > max_conj:
                _merge_cheapest(pool, sorted(pool.alive), max_conj, max_in)
        return tuple(sorted(pool.alive))


def reducer(
    *,
    max_conj: int = 128,
    max_in: int = 64,
    bound: bool = True,
    merge: bool = True,
    hull_maintenance: bool = False,
) -> Reducer:
    """An empty :class:`Reducer` for :func:`reduce`'s keyword arguments."""
    max_conj, max_in, bound, merge, hull = _settings(
        max_conj, max_in, bound, merge, hull_maintenance
    )
    return Reducer(max_conj=max_conj, max_in=max_in, bound=bound, merge=merge, hull=hull)
