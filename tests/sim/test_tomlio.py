"""The one TOML writer (:mod:`pubmesh.tomlio`): whatever it writes, :mod:`tomllib` reads back
as the same data — strings with every kind of escape, floats to the last bit (inf and nan
included), 64-bit integers, nested tables, inline tables, arrays of tables, awkward keys."""

from __future__ import annotations

import datetime
import math
import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubmesh.tomlio import TomlWriteError, dumps, dumps_key, dumps_value

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SCALARS = st.one_of(
    st.booleans(),
    INT64,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)
KEYS = st.text(max_size=12)


def same(a: Any, b: Any) -> bool:
    """Equality with nan equal to nan and -0.0 told from 0.0 (a round trip keeps both)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


values = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(KEYS, inner, max_size=4),
    ),
    max_leaves=20,
)
documents = st.dictionaries(KEYS, values, max_size=6)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(documents)
def test_every_document_reads_back_as_written(data: dict[str, Any]) -> None:
    text = dumps(data)
    assert same(tomllib.loads(text), data), text


@settings(derandomize=True, max_examples=300, deadline=None)
@given(values)
def test_every_value_reads_back_as_written(value: Any) -> None:
    text = dumps_value(value)
    assert same(tomllib.loads(f"v = {text}")["v"], value), text


@settings(derandomize=True, max_examples=200, deadline=None)
@given(documents)
def test_inline_tables_read_back_as_written(data: dict[str, Any]) -> None:
    text = dumps(data, inline=lambda path: len(path) >= 2)
    assert same(tomllib.loads(text), data), text


NASTY_STRINGS = [
    "",
    '"',
    "\\",
    '\\"',
    '"""',
    "'''",
    "\\u0041",
    "\\n",
    "a\nb\r\nc",
    "\t tab",
    "\x00\x01\x08\x0b\x0c\x1f",
    "\x7f",
    "\x80\x9f",  # C1 controls are fine in TOML strings
    "é ü ß 漢字 😀",
    "\u2028\u2029",
    "\ufeff",
    "#not a comment",
    "key = value",
    "[section]",
    "${HOME} $(rm -rf /) `x`",
    " leading and trailing ",
    "a" * 5000,
]


@pytest.mark.parametrize("text", NASTY_STRINGS)
def test_nasty_strings_round_trip_as_values_and_as_keys(text: str) -> None:
    assert tomllib.loads(f"v = {dumps_value(text)}")["v"] == text
    assert tomllib.loads(dumps({text: text}))[text] == text
    assert tomllib.loads(dumps({text: {text: [{text: text}]}})) == {text: {text: [{text: text}]}}


def test_escapes_are_the_short_ones_where_toml_has_them() -> None:
    assert dumps_value('a"b\\c\nd\te\x7f\x00') == '"a\\"b\\\\c\\nd\\te\\u007f\\u0000"'


@pytest.mark.parametrize(
    "number",
    [0.0, -0.0, 0.1, 1e16, 1e300, 5e-324, -1.5e-7, 2.0**53 + 1, math.pi, 1 / 3],
)
def test_floats_keep_every_bit(number: float) -> None:
    back = tomllib.loads(f"v = {dumps_value(number)}")["v"]
    assert isinstance(back, float) and back.hex() == number.hex()


def test_special_floats() -> None:
    assert dumps_value(math.inf) == "inf"
    assert dumps_value(-math.inf) == "-inf"
    assert dumps_value(math.nan) == "nan"
    assert math.isnan(tomllib.loads("v = " + dumps_value(math.nan))["v"])


def test_integers_and_bools_keep_their_type() -> None:
    data = {"t": True, "f": False, "one": 1, "big": 2**63 - 1, "small": -(2**63), "x": 1.0}
    back = tomllib.loads(dumps(data))
    assert back == data
    assert type(back["one"]) is int and type(back["x"]) is float and back["t"] is True


def test_dates_and_times() -> None:
    utc = datetime.UTC
    ist = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
    data = {
        "d": datetime.date(1979, 5, 27),
        "t": datetime.time(7, 32, 0, 999999),
        "local": datetime.datetime(1979, 5, 27, 7, 32),
        "utc": datetime.datetime(1979, 5, 27, 7, 32, tzinfo=utc),
        "ist": datetime.datetime(1979, 5, 27, 7, 32, 1, 5, tzinfo=ist),
    }
    assert tomllib.loads(dumps(data)) == data


def test_layout_of_a_document() -> None:
    data = {
        "stack": {"gossip": {"fanout": 3}},
        "run": {"name": "x", "nodes": 2},
        "faults": [{"at": 1.0, "kind": "crash"}, {"at": 2.0, "kind": "leave"}],
        "top": 1,
        "empty": {},
    }
    text = dumps(data, order=["run"])
    assert text == (
        "top = 1\n"
        "\n"
        "[run]\n"
        'name = "x"\n'
        "nodes = 2\n"
        "\n"
        "[empty]\n"
        "\n"
        "[[faults]]\n"
        "at = 1.0\n"
        'kind = "crash"\n'
        "\n"
        "[[faults]]\n"
        "at = 2.0\n"
        'kind = "leave"\n'
        "\n"
        "[stack.gossip]\n"
        "fanout = 3\n"
    )
    assert tomllib.loads(text) == data


def test_keys_are_bare_only_when_they_can_be() -> None:
    assert dumps_key("fan_out-2") == "fan_out-2"
    assert dumps_key("faults.0.at") == '"faults.0.at"'
    assert dumps_key("") == '""'
    assert dumps_key("é") == '"é"'


def test_inline_tables_and_empty_containers() -> None:
    assert dumps_value({}) == "{}"
    assert dumps_value([]) == "[]"
    assert dumps_value({"b": 1, "a": [{"c": "d"}]}) == '{ a = [{ c = "d" }], b = 1 }'
    assert tomllib.loads(dumps({"a": []})) == {"a": []}


@pytest.mark.parametrize(
    "bad",
    [2**63, -(2**63) - 1, "lone \ud800 surrogate", None, object(), b"bytes", {1: "x"}, {1, 2}],
)
def test_what_toml_cannot_hold_is_refused(bad: Any) -> None:
    with pytest.raises(TomlWriteError):
        dumps_value(bad)
    with pytest.raises(TomlWriteError):
        dumps({"v": bad})


def test_offsets_in_seconds_are_refused() -> None:
    odd = datetime.timezone(datetime.timedelta(seconds=30))
    with pytest.raises(TomlWriteError):
        dumps_value(datetime.datetime(2000, 1, 1, tzinfo=odd))


def test_the_scenario_writer_and_the_sweep_overrides_use_it() -> None:
    from pubmesh.analysis.sweep import _toml_literal
    from pubmesh.scenario.model import dump_toml

    name = 'a "quoted"\\name\x7f'
    text = dump_toml(
        {
            "run": {"name": name, "stack": "gossip"},
            "network": {"latency": {"dist": "constant", "value": 0.01}},
            "faults": [{"at": 1.0, "kind": "crash", "nodes": [1, 2]}],
            "stack": {"gossip": {"fanout": 3}},
        }
    )
    assert 'latency = { dist = "constant", value = 0.01 }' in text
    assert text.index("[run]") < text.index("[network]") < text.index("[[faults]]")
    assert text.index("[[faults]]") < text.index("[stack.gossip]")
    assert tomllib.loads(text)["run"]["name"] == name
    assert tomllib.loads(f"v = {_toml_literal(name)}")["v"] == name
