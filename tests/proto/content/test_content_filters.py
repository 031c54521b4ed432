"""Content filters (pubmesh.proto.content): docs/protocols/chord.md §4 rules, properties, and a
cross-check against the analysis matcher on a real Spark session."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubmesh.analysis import metrics
from pubmesh.proto.content import (
    Conjunction,
    FilterError,
    covers,
    covers_any,
    disjunction_covers,
    inc,
    is_satisfiable,
    matches,
    matches_prepared,
    perfect_merge,
    prepare,
    publication_attributes,
    reduce,
    reducer,
    to_filter,
    upper_bound,
    validate,
    with_topic,
)
from pubmesh.proto.content.values import java_double_text, number_of, text_of
from support.tracebuild import frame

V = validate


def F(attr_constraint: Any) -> Conjunction:
    """A one-attribute conjunction on "x"."""
    return V({"x": attr_constraint})


# --------------------------------------------------------------------------------------------
# The analysis's view of values
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "number"),
    [
        (5, 5.0), (2.5, 2.5), (True, None), ("5", 5.0), (" 5\n", 5.0), ("1e3", 1000.0),
        ("5.", 5.0), (".5", 0.5), ("+5", 5.0), ("1d", 1.0), ("0x1p3", 8.0), ("1_0", None),
        ("0x10", None), ("abc", None), ("", None), ("-", None), ("\u0661", None), ([1], None),
    ],
)  # fmt: skip
def test_number_of_follows_spark_try_cast(value: Any, number: float | None) -> None:
    assert number_of(value) == number


def test_number_of_special_literals() -> None:
    assert number_of("Infinity") == float("inf")
    assert number_of("-inf") == float("-inf")
    nan = number_of("NaN")
    assert nan is not None and nan != nan


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (5.0, "5.0"), (100.0, "100.0"), (1e-7, "1.0E-7"), (1e16, "1.0E16"), (0.001, "0.001"),
        (9999999.0, "9999999.0"), (1e7, "1.0E7"), (123456789.0, "1.23456789E8"), (-0.0, "-0.0"),
        (-2.5e-5, "-2.5E-5"), (12, "12"), (True, "true"), ("x", "x"),
        ([1, "a", 2.0], '[1,"a",2.0]'),
        ({"b": 1, "a": None}, '{"a":null,"b":1}'),
    ],
)  # fmt: skip
def test_text_of_is_sparks_text(value: Any, text: str) -> None:
    assert text_of(value) == text


def test_java_double_text_round_trips() -> None:
    for x in (0.1, 1 / 3, 2.0**60, 5e-324, 1.7976931348623157e308, 123.456):
        assert float(java_double_text(x)) == x


# --------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("filter", "message"),
    [
        ({"price": {"lte": 3}}, "unknown operator 'lte'"),
        ({"price": {}}, "empty constraint"),
        ({"sym": {"in": "ACME"}}, "'in' needs a list"),
        ({"$topic": "t"}, "reserved"),
        ({"price": None}, "must be a string, number or boolean"),
        ({"price": {"lt": [1]}}, "must be a string, number or boolean"),
        ({"sym": {"in": [1, None]}}, "must be a string, number or boolean"),
        ({"price": {"lt": float("nan")}}, "non-finite"),
        ({"price": {"lt": "Infinity"}}, "non-finite"),
        ({"sym": "{x"}, "operator object"),
        ({"sym": [1, 2]}, "bare list"),
    ],
)
def test_validate_rejects(filter: dict[str, Any], message: str) -> None:
    with pytest.raises(FilterError, match=message) as info:
        validate(filter)
    attr = next(iter(filter))
    assert repr(attr) in str(info.value)  # the message names the attribute


def test_validate_rejects_non_objects() -> None:
    with pytest.raises(FilterError, match="JSON object"):
        validate([1, 2])  # type: ignore[arg-type]


def test_reserved_names_allowed_for_maintenance() -> None:
    conj = validate({"$topic": "$chord.join", "$join": {"ge": 1, "lt": 9}}, allow_reserved=True)
    assert matches(conj, {"$topic": "$chord.join", "$join": 4})
    assert not matches(conj, {"$topic": "$chord.join", "$join": 9})


def test_canonical_text_and_round_trip() -> None:
    a = V({"sym": {"eq": "ACME"}, "price": {"lt": 10.0, "gt": 2}})
    b = V({"price": {"gt": 2.0, "lt": 10}, "sym": "ACME"})
    assert a == b and hash(a) == hash(b)
    assert a.text == '{"price":{"gt":2,"lt":10},"sym":"ACME"}'
    assert to_filter(a) == {"price": {"gt": 2, "lt": 10}, "sym": "ACME"}
    assert V({"s": {"ge": "ab", "lt": "ac"}}) == V({"s": {"prefix": "ab"}})
    assert V({"x": {"ge": 3, "le": 3}}).text == '{"x":3}'
    assert V({"x": {"eq": "{x"}}).text == '{"x":{"eq":"{x"}}'
    assert not is_satisfiable(V({"x": {"gt": 3, "lt": 2}}))
    assert not is_satisfiable(V({"x": {"lt": "a", "gt": 1}}))  # no value of either kind
    assert is_satisfiable(V({}))


def test_inc() -> None:
    assert inc("ab") == "ac"
    assert inc("a\U0010ffff") == "b"
    assert inc("\U0010ffff") is None
    assert inc("") is None


def test_topics() -> None:
    sub = with_topic({"price": {"lt": 10}}, "stocks")
    assert to_filter(sub) == {"$topic": "stocks", "price": {"lt": 10}}
    pub = publication_attributes({"price": 3, "$topic": "forged", "$x": 1}, "stocks")
    assert pub == {"price": 3, "$topic": "stocks"}
    assert matches(sub, pub)
    assert not matches(sub, publication_attributes({"price": 3}, "bonds"))
    with pytest.raises(FilterError):
        with_topic({"$topic": "x"}, "stocks")
    # one table serves all topics: same filter, two topics merge into an in-list
    merged = perfect_merge(sub, with_topic({"price": {"lt": 10}}, "bonds"))
    assert merged is not None and to_filter(merged)["$topic"] == {"in": ["bonds", "stocks"]}


# --------------------------------------------------------------------------------------------
# Literal matching: the analysis rules
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("filter", "attributes", "expected"),
    [
        ({}, {}, True),
        ({"p": {"ne": 1}}, {}, False),  # missing fails every op, ne included
        ({"p": {"ne": 1}}, {"p": None}, False),  # so does null
        ({"p": 1}, {"p": "1.0"}, True),  # both numbers: numeric
        ({"p": {"ge": 5}}, {"p": 15}, True),  # "15" < "5" as text, not as numbers
        ({"p": {"lt": "a"}}, {"p": 5}, True),  # a number against a string: texts
        ({"p": {"lt": 10}}, {"p": "abc"}, False),
        ({"p": {"prefix": "1"}}, {"p": 10}, True),  # prefix: text(x) starts with text(p)
        ({"p": {"prefix": 1}}, {"p": "1abc"}, True),
        ({"p": {"prefix": "1."}}, {"p": 1e-7}, True),  # text "1.0E-7"
        ({"p": {"in": [1, "a"]}}, {"p": 1.0}, True),
        ({"p": {"in": [1, "a"]}}, {"p": "b"}, False),
        ({"p": True}, {"p": "true"}, True),  # same text
        ({"p": {"gt": 1e300}}, {"p": "NaN"}, True),  # Spark: NaN above everything
        ({"p": {"lt": 1e300}}, {"p": "NaN"}, False),
    ],
)
def test_literal_matching(
    filter: dict[str, Any], attributes: dict[str, Any], expected: bool
) -> None:
    assert matches(filter, attributes) is expected


# --------------------------------------------------------------------------------------------
# Covering: the spec's pair rules
# --------------------------------------------------------------------------------------------
COVER_CASES = [
    # lt a ⊒ lt b ⟺ b ≤ a
    ({"lt": 5}, {"lt": 5}, True), ({"lt": 5}, {"lt": 4}, True), ({"lt": 5}, {"lt": 6}, False),
    # lt a ⊒ le b ⟺ b < a
    ({"lt": 5}, {"le": 4}, True), ({"lt": 5}, {"le": 5}, False),
    # le a ⊒ lt b ⟺ b ≤ a
    ({"le": 5}, {"lt": 5}, True), ({"le": 5}, {"lt": 6}, False),
    # mirrored for gt/ge
    ({"gt": 5}, {"gt": 6}, True), ({"gt": 5}, {"gt": 4}, False), ({"gt": 5}, {"ge": 6}, True),
    ({"gt": 5}, {"ge": 5}, False), ({"ge": 5}, {"gt": 5}, True), ({"ge": 5}, {"gt": 4}, False),
    # the same with strings
    ({"lt": "m"}, {"lt": "c"}, True), ({"lt": "m"}, {"le": "m"}, False),
    ({"ge": "m"}, {"gt": "m"}, True),
    # any op ⊒ eq b ⟺ b satisfies it
    ({"lt": 5}, 4, True), ({"lt": 5}, 5, False), ({"ne": 5}, 4, True), ({"ne": 5}, 5, False),
    ({"prefix": "ab"}, "abc", True), ({"prefix": "ab"}, "b", False), ({"in": [1, 2]}, 2, True),
    ({"ge": 1, "le": 3}, 3, True), ({"ge": 1, "lt": 3}, 3, False), (2, 2, True), (2, 3, False),
    # ⊒ in L ⟺ all of L do
    ({"lt": 5}, {"in": [1, 4]}, True), ({"lt": 5}, {"in": [1, 5]}, False),
    ({"in": [1, 2, 3]}, {"in": [3, 1]}, True), ({"in": [1, 2]}, {"in": [1, 3]}, False),
    # ne a ⊒ X ⟺ a ∉ X
    ({"ne": 5}, {"lt": 5}, True), ({"ne": 5}, {"le": 5}, False), ({"ne": 5}, {"gt": 6}, True),
    ({"ne": "a"}, {"prefix": "b"}, True), ({"ne": "ab"}, {"prefix": "a"}, False),
    ({"ne": 5}, {"ne": 5}, True), ({"ne": 5}, {"ne": 6}, False),
    # prefix p ⊒ prefix q ⟺ q starts with p
    ({"prefix": "ab"}, {"prefix": "abc"}, True), ({"prefix": "ab"}, {"prefix": "a"}, False),
    ({"prefix": "ab"}, {"prefix": "ac"}, False), ({"prefix": ""}, {"prefix": "x"}, True),
    # lt "B" ⊒ prefix "A" (via inc)
    ({"lt": "B"}, {"prefix": "A"}, True), ({"lt": "AZ"}, {"prefix": "A"}, False),
    # eq/in never cover an interval
    (5, {"ge": 5, "le": 6}, False), ({"in": [1, 2, 3]}, {"gt": 1, "lt": 3}, False),
    # intervals minus points: E₁ ∩ I₂ ⊆ E₂
    ({"lt": 9, "ne": 3}, {"lt": 5, "ne": 3}, True), ({"lt": 9, "ne": 3}, {"lt": 5}, False),
    ({"lt": 9, "ne": 7}, {"lt": 5}, True), ({"prefix": ""}, {"ne": 3}, True),
    ({"ne": 3}, {"prefix": ""}, False),
]  # fmt: skip


@pytest.mark.parametrize(("a", "b", "expected"), COVER_CASES)
def test_pair_rules(a: Any, b: Any, expected: bool) -> None:
    assert covers(F(a), F(b)) is expected


def test_conjunction_and_disjunction_covering() -> None:
    wide, narrow = V({"p": {"lt": 10}}), V({"p": {"lt": 5}, "s": "x"})
    assert covers(wide, narrow) and not covers(narrow, wide)
    assert not covers(V({"p": {"lt": 10}, "q": 1}), V({"p": 3}))  # q missing in b: no cover
    assert covers(V({"p": 1}), V({"p": {"gt": 3, "lt": 2}, "q": 1}))  # b unsatisfiable
    assert covers(V({}), narrow)
    d1 = (V({"p": {"lt": 5}}), V({"s": {"prefix": "a"}}))
    assert covers_any(d1, V({"s": "abc", "p": 9}))
    assert disjunction_covers(d1, (V({"p": 1}), V({"s": "ab"})))
    # sufficient, not exact: lt 5 ∨ ge 5 ⊇ everything numeric, but no single conjunct covers
    assert not disjunction_covers((F({"lt": 5}), F({"ge": 5})), (F({"ne": 0}),))


# --------------------------------------------------------------------------------------------
# Perfect merge: the spec's rules
# --------------------------------------------------------------------------------------------
MERGE_CASES = [
    # eq/in ∪ eq/in → in
    (1, 2, {"in": [1, 2]}), ({"in": [1, "a"]}, "b", {"in": [1, "a", "b"]}), (1, 1, 1),
    # same-kind intervals that overlap or touch → hull
    ({"ge": 1, "lt": 5}, {"ge": 3, "lt": 8}, {"ge": 1, "lt": 8}),
    ({"ge": 1, "lt": 5}, {"ge": 5, "lt": 8}, {"ge": 1, "lt": 8}),
    ({"prefix": "ab"}, {"prefix": "ac"}, {"ge": "ab", "lt": "ad"}),
    ({"ge": 1, "lt": 5}, {"gt": 6}, None),  # a gap
    ({"lt": 5}, {"gt": "a"}, None),  # different kinds
    # one missing open point: hull + ne
    ({"gt": 1, "lt": 5}, {"gt": 5, "lt": 8}, {"gt": 1, "lt": 8, "ne": 5}),
    ({"lt": 5}, {"gt": 5}, {"ne": 5}),
    # interval ∪ points at its open ends → those ends closed
    ({"gt": 1, "lt": 5}, 5, {"gt": 1, "le": 5}),
    ({"gt": 1, "lt": 5}, {"in": [1, 5]}, {"ge": 1, "le": 5}),
    ({"gt": 1, "lt": 5}, {"in": [1, 6]}, None),
    ({"gt": 1, "lt": 5, "ne": 3}, 3, {"gt": 1, "lt": 5}),
    # → {"prefix": ""} ("present")
    ({"lt": 5}, {"ge": 5}, {"prefix": ""}), ({"le": 5}, {"gt": 5}, {"prefix": ""}),
    ({"ne": 5}, 5, {"prefix": ""}), ({"ne": 5}, {"ne": 6}, {"prefix": ""}),
    ({"ne": "a"}, {"in": ["a", "b"]}, {"prefix": ""}), ({"ne": 5}, {"in": [4, 6]}, {"ne": 5}),
    # strings: all strings is {"ge": ""}
    ({"lt": "m"}, {"ge": "m"}, {"ge": ""}),
    # two holes are not expressible
    ({"lt": 5, "ne": 2}, {"gt": 5}, None),
]  # fmt: skip


@pytest.mark.parametrize(("a", "b", "expected"), MERGE_CASES)
def test_perfect_merge_rules(a: Any, b: Any, expected: Any) -> None:
    merged = perfect_merge(F(a), F(b))
    assert merged == (None if expected is None else F(expected))
    assert perfect_merge(F(b), F(a)) == merged


def test_perfect_merge_needs_one_differing_attribute() -> None:
    assert perfect_merge(V({"p": 1, "q": 1}), V({"p": 2, "q": 1})) == V(
        {"p": {"in": [1, 2]}, "q": 1}
    )
    assert perfect_merge(V({"p": 1, "q": 1}), V({"p": 2, "q": 2})) is None
    assert perfect_merge(V({"p": 1}), V({"p": 1, "q": 1})) is None  # covering, not merging


def test_upper_bound_shapes() -> None:
    ub = upper_bound(V({"p": {"lt": 3}, "q": 1}), V({"p": {"gt": 7}, "r": 2}))
    assert to_filter(ub) == {"p": {"prefix": ""}}  # gap on p, q and r dropped
    ub = upper_bound(V({"p": {"ge": 1, "lt": 3}}), V({"p": {"gt": 7, "le": 9}}))
    assert to_filter(ub) == {"p": {"ge": 1, "le": 9}}
    many = [f"k{i:03d}" for i in range(70)]
    ub = upper_bound(V({"s": {"in": many[:40]}}), V({"s": {"in": many[40:]}}), max_in=64)
    assert to_filter(ub) == {"s": {"prefix": "k0"}}  # longest common prefix
    ub = upper_bound(V({"n": {"in": list(range(40))}}), V({"n": {"in": list(range(40, 80))}}))
    assert to_filter(ub) == {"n": {"ge": 0, "le": 79}}  # numeric hull
    assert to_filter(upper_bound(F(1), F("a"))) == {"x": {"in": [1, "a"]}}


def test_reduce_steps() -> None:
    a, b, c = V({"p": {"lt": 5}}), V({"p": 3, "q": 1}), V({"p": {"gt": 9}})
    unsat = V({"p": {"gt": 5, "lt": 1}})
    assert reduce([unsat]) == ()  # (1)
    assert reduce([b, a, c]) == tuple(sorted([a, c]))  # (2)
    twin = V({"p": {"le": 4.5, "lt": 5}})  # equal to a
    assert reduce([a, twin]) == (a,)
    merged = reduce([V({"p": 1}), V({"p": 2}), V({"p": 3})])  # (3)
    assert merged == (V({"p": {"in": [1, 2, 3]}}),)
    # a merge result covering something else drops it as well
    assert reduce([F({"lt": 5}), F({"ge": 5}), V({"x": 1, "y": 2})]) == (F({"prefix": ""}),)
    # (4) the bound: many singletons, max_conj 2
    bounded = reduce([V({"p": i, "q": i}) for i in range(10)], max_conj=2, max_in=3)
    assert len(bounded) <= 2
    # maintenance conjunctions are hulled first, down to 4 per maintenance topic
    maint = [
        validate(
            {"$topic": "$chord.join", "$join": {"ge": 10 * i, "lt": 10 * i + 5}},
            allow_reserved=True,
        )
        for i in range(8)
    ]
    users = [with_topic({"p": i}, f"t{i}") for i in range(3)]
    out = reduce(maint + users, max_conj=8)
    assert len([c for c in out if "$join" in c.names]) == 4
    assert all(u in out for u in users)


def test_reduce_is_deterministic_and_sorted() -> None:
    conjs = [V({"p": {"gt": i, "lt": i + 2}, "q": i % 3}) for i in range(0, 40, 3)]
    once = reduce(conjs, max_conj=4)
    assert len(once) == 4
    assert list(once) == sorted(once, key=lambda c: c.text)
    assert reduce(once, max_conj=4) == once
    assert disjunction_covers(once, conjs)


# --------------------------------------------------------------------------------------------
# Properties on single-kind attributes
# --------------------------------------------------------------------------------------------
NUMS = [-2, -1, 0, 0.5, 1, 1.5, 2, 3]
STRS = ["", "a", "ab", "abc", "ac", "b", "ba", "c", "\U0010ffff"]
# sample values: the operands, points between and beyond them, and missing
NUM_SAMPLES: list[Any] = [None, -3, -1.5, -0.5, 0.25, 0.75, 1.25, 1.75, 2.5, 4, *NUMS, "1.5"]
STR_SAMPLES: list[Any] = [None, "aa", "abd", "abc\U0010ffff", "b\x00", "bb", "d", *STRS, True]
KINDS = {"n": (NUMS, NUM_SAMPLES), "m": (NUMS, NUM_SAMPLES), "s": (STRS, STR_SAMPLES)}
GRID = [
    {k: v for k, v in zip(("n", "m", "s"), values, strict=True) if v is not None}
    for values in itertools.product(NUM_SAMPLES[::2], [None, -1, 0.75, 1.5, 4], STR_SAMPLES)
]
# every sample of every attribute alone, plus a few combinations
SINGLES = [{a: x} for a, (_, samples) in KINDS.items() for x in samples if x is not None]
SINGLES += GRID[::37]


def constraint(attr: str) -> st.SearchStrategy[Any]:
    operands, _ = KINDS[attr]
    value = st.sampled_from(operands)
    ops = ["eq", "ne", "lt", "le", "gt", "ge", "in", *(["prefix"] if attr == "s" else [])]
    op_values = st.fixed_dictionaries(
        {}, optional={op: st.lists(value, max_size=3) if op == "in" else value for op in ops}
    ).filter(bool)
    present = st.just({"prefix": ""})
    return st.one_of(value, op_values, op_values, present)


def filters() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={a: constraint(a) for a in KINDS})


conjunctions = filters().map(validate)
SETTINGS = settings(derandomize=True, max_examples=150, deadline=None, database=None)


def matches_any(disjunction: tuple[Conjunction, ...], v: Mapping[str, Any]) -> bool:
    return any(matches(c, v) for c in disjunction)


@SETTINGS
@given(filters())
def test_normal_form_agrees_with_literal_matching(f: dict[str, Any]) -> None:
    conj = validate(f)
    for v in SINGLES:
        assert matches(conj, v) == matches(f, v), (conj, v)
    assert validate(to_filter(conj)) == conj
    assert all(matches(to_filter(conj), v) == matches(conj, v) for v in SINGLES)


@SETTINGS
@given(conjunctions)
def test_prepared_matching_agrees_with_matches(conj: Conjunction) -> None:
    """matches_prepared over prepare(v) is matches(conj, v), for the grid's values of every
    kind (numbers, numeric text, other text, booleans, NaN and missing attributes)."""
    for v in (*SINGLES, *GRID):
        assert matches_prepared(conj, prepare(v)) == matches(conj, v), (conj, v)


@SETTINGS
@given(conjunctions, conjunctions)
def test_covering_is_sound(a: Conjunction, b: Conjunction) -> None:
    if covers(a, b):
        assert all(matches(a, v) for v in GRID if matches(b, v)), (a, b)


@SETTINGS
@given(st.sampled_from(list(KINDS)), st.data())
def test_covering_single_attribute_finds_covers(attr: str, data: st.DataObject) -> None:
    """Covering on one attribute is sound, and exact when the covered side is finite."""
    a = validate({attr: data.draw(constraint(attr))})
    b = validate({attr: data.draw(constraint(attr))})
    _, samples = KINDS[attr]
    implied = all(matches(a, {attr: x}) for x in samples if matches(b, {attr: x}))
    if covers(a, b):
        assert implied
    b_constraint = to_filter(b)[attr]
    if not isinstance(b_constraint, dict) or set(b_constraint) == {"in"}:
        # b is finite and its values are among the samples: covering is exact
        assert covers(a, b) == implied, (a, b)


def siblings() -> st.SearchStrategy[tuple[Conjunction, Conjunction]]:
    """Two conjunctions differing on (at most) one attribute: perfect-merge candidates."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[Conjunction, Conjunction]:
        f = draw(filters())
        attr = draw(st.sampled_from(list(KINDS)))
        f[attr] = draw(constraint(attr))
        return validate(f), validate({**f, attr: draw(constraint(attr))})

    return build()


@SETTINGS
@given(st.one_of(siblings(), siblings(), st.tuples(conjunctions, conjunctions)))
def test_perfect_merge_is_exact(pair: tuple[Conjunction, Conjunction]) -> None:
    a, b = pair
    merged = perfect_merge(a, b)
    if merged is not None:
        for v in GRID:
            assert matches(merged, v) == (matches(a, v) or matches(b, v)), (a, b, merged, v)


def test_perfect_merge_strategy_finds_merges() -> None:
    """Guards the property above against vacuity: the strategy does produce merges."""
    found = []

    @SETTINGS
    @given(siblings())
    def collect(pair: tuple[Conjunction, Conjunction]) -> None:
        found.append(perfect_merge(*pair) not in (None, *pair))

    collect()
    assert sum(found) >= 20


@SETTINGS
@given(conjunctions, conjunctions)
def test_upper_bound_is_a_superset(a: Conjunction, b: Conjunction) -> None:
    ub = upper_bound(a, b, max_in=2)
    assert covers(ub, a) and covers(ub, b)
    for v in GRID:
        if matches(a, v) or matches(b, v):
            assert matches(ub, v), (a, b, ub, v)
    assert all(
        len(c["in"]) <= 2 for c in to_filter(ub).values() if isinstance(c, dict) and "in" in c
    )


@SETTINGS
@given(st.lists(conjunctions, max_size=8))
def test_reduce_unbounded_preserves_the_union(d: list[Conjunction]) -> None:
    reduced = reduce(d, bound=False)
    for v in GRID:
        assert matches_any(reduced, v) == matches_any(tuple(d), v), (d, reduced, v)
    assert reduce(reduced, bound=False) == reduced
    assert all(is_satisfiable(c) for c in reduced)
    assert not any(covers(x, y) for x, y in itertools.permutations(reduced, 2))
    assert not any(perfect_merge(x, y) for x, y in itertools.combinations(reduced, 2))


@SETTINGS
@given(st.lists(conjunctions, max_size=10), st.integers(1, 4), st.integers(1, 3))
def test_reduce_bounded_is_a_superset_within_bounds(
    d: list[Conjunction], max_conj: int, max_in: int
) -> None:
    reduced = reduce(d, max_conj=max_conj, max_in=max_in)
    assert len(reduced) <= max_conj
    for c in reduced:
        for constraint in to_filter(c).values():
            if isinstance(constraint, dict) and "in" in constraint:
                assert len(constraint["in"]) <= max_in
    for v in GRID:
        if matches_any(tuple(d), v):
            assert matches_any(reduced, v), (d, reduced, v)
    assert disjunction_covers(reduced, [c for c in d if is_satisfiable(c)])
    assert reduce(reduced, max_conj=max_conj, max_in=max_in) == reduced


@SETTINGS
@given(
    st.lists(st.lists(conjunctions, max_size=4), min_size=1, max_size=5),
    st.lists(conjunctions, max_size=4),
    st.integers(1, 4),
    st.integers(1, 3),
    st.booleans(),
)
def test_reducer_part_by_part_is_reduce_of_the_concatenation(
    parts: list[list[Conjunction]],
    other: list[Conjunction],
    max_conj: int,
    max_in: int,
    bound: bool,
) -> None:
    """A Reducer fed the parts in order gives reduce() of their concatenation, and a copy
    taken after a prefix continues that prefix without disturbing the original (the chord
    stack's PrefixChain relies on both for traces identical to reducing each union whole)."""
    kw: dict[str, Any] = {
        "max_conj": max_conj,
        "max_in": max_in,
        "bound": bound,
        "hull_maintenance": True,
    }
    grown = reducer(**kw)
    flat: list[Conjunction] = []
    for part in parts:
        branch = grown.copy()
        branch.extend(other)
        assert branch.result() == reduce([*flat, *other], **kw)
        grown.extend(part)
        flat.extend(part)
        assert grown.result() == reduce(flat, **kw)
    assert grown.result() == grown.result()  # result() leaves the pool as it was


def test_reducer_hull_on_a_prefix_matches_reduce() -> None:
    """Step 4 (the maintenance hull) runs on a copy: more parts after a result() still give
    the whole reduction."""
    maint = [
        validate(
            {"$topic": "$chord.join", "$join": {"ge": 10 * i, "lt": 10 * i + 5}},
            allow_reserved=True,
        )
        for i in range(12)
    ]
    grown = reducer(max_conj=8, hull_maintenance=True)
    for i in range(0, 12, 3):
        grown.extend(maint[i : i + 3])
        assert grown.result() == reduce(maint[: i + 3], max_conj=8, hull_maintenance=True)
    assert 0 < len(grown.result()) <= 4  # MAINTENANCE_HULL


# --------------------------------------------------------------------------------------------
# Cross-check with the analysis matcher (Spark)
# --------------------------------------------------------------------------------------------
ODD_VALUES: list[Any] = [
    0, 1, 5, 15, -2, 2.5, 100.0, 1e-7, 1.5e10, -0.0, "5", " 5", "1e3", "5.", "0x1p3", "1d",
    "NaN", "inf", "abc", "ab", "b", "", "-", "1.0E-7", "1abc", "true", True, False, "ACME",
    "{x", [1, "a"], {"k": 2.0}, None,
]  # fmt: skip
ODD_OPERANDS: list[Any] = [
    0, 1, 5, 2.5, 100.0, -2, 1e-7, "5", "1e3", "abc", "a", "b", "", "1", "1.", "-", "true", True,
]  # fmt: skip


def random_filter(rng: random.Random, single_kind: bool) -> dict[str, Any]:
    f: dict[str, Any] = {}
    for attr in rng.sample(["n", "s", "m"], rng.randint(0, 2)):
        if single_kind:
            operands = NUMS if attr != "s" else STRS[:-1]
            ops = ["eq", "ne", "lt", "le", "gt", "ge", "in"] + (["prefix"] if attr == "s" else [])
        else:
            operands, ops = ODD_OPERANDS, ["eq", "ne", "lt", "le", "gt", "ge", "in", "prefix"]
        if rng.random() < 0.25:
            f[attr] = rng.choice(operands)
            continue
        chosen = {}
        for op in rng.sample(ops, rng.randint(1, 2)):
            chosen[op] = (
                rng.sample(operands, rng.randint(0, 3)) if op == "in" else rng.choice(operands)
            )
        f[attr] = chosen
    return f


def random_attributes(rng: random.Random, single_kind: bool) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for attr in ("n", "s", "m"):
        if rng.random() < 0.85:
            if single_kind:
                pool = NUM_SAMPLES if attr != "s" else STR_SAMPLES
                attrs[attr] = rng.choice([x for x in pool if x != "\U0010ffff"])
            else:
                attrs[attr] = rng.choice(ODD_VALUES)
    return attrs


@pytest.mark.spark
def test_matches_agrees_with_the_analysis(spark: Any) -> None:
    rng = random.Random(20240603)
    subs: list[tuple[Any, str | None, dict[str, Any]]] = []  # (what we match with, topic, filter)
    for i in range(60):
        topic = rng.choice([None, "t", "u"])
        if i % 2:
            raw = random_filter(rng, single_kind=False)
            ours: Any = {**raw, "$topic": topic} if topic else raw
            subs.append((ours, topic, raw))
        else:  # a canonical conjunction (normal form), travelling as to_filter()
            conj = validate(random_filter(rng, single_kind=True))
            if rng.random() < 0.5:
                other = validate(random_filter(rng, single_kind=True))
                conj = perfect_merge(conj, other) or upper_bound(conj, other, max_in=2)
            subs.append((with_topic(conj, topic), topic, to_filter(conj)))
    pubs = []
    for j in range(40):
        single = j % 2 == 0
        pubs.append((rng.choice(["t", "u"]), random_attributes(rng, single), single))

    def dumps(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    sub_frame = frame(
        spark,
        "subscriptions",
        [
            {"node": i, "topic": t, "filter": dumps(f), "t_start": 0.0}
            for i, (_, t, f) in enumerate(subs)
        ],
    )
    pub_frame = frame(
        spark,
        "publications",
        [
            {"pub_id": j, "publisher": 0, "topic": t, "attributes": dumps(a), "t": 1.0}
            for j, (t, a, _) in enumerate(pubs)
        ],
    )
    got = {
        (r.pub_id, r.node)
        for r in metrics.matching_subscriptions(pub_frame, sub_frame)
        .select("pub_id", "node")
        .collect()
    }
    want = set()
    checked = 0
    for j, (topic, attrs, single) in enumerate(pubs):
        for i, (ours, _, _) in enumerate(subs):
            if isinstance(ours, Conjunction) and not single:
                continue  # the normal form promises agreement on single-kind values only
            checked += 1
            if matches(ours, publication_attributes(attrs, topic)):
                want.add((j, i))
    checked_pairs = {
        (j, i)
        for j, (_, _, single) in enumerate(pubs)
        for i, (ours, _, _) in enumerate(subs)
        if single or not isinstance(ours, Conjunction)
    }
    assert checked >= 300 and len(want) >= 30
    assert got & checked_pairs == want
