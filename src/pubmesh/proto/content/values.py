"""How the analysis sees one JSON value: is it a number, which number, and what is its text.

The analysis matcher (:mod:`pubmesh.analysis.metrics`, ``_satisfied``) reads every filter
operand and every publication attribute through Spark's ``from_json(…, map<string,string>)``
and then ``try_cast(… as double)``. So a value *is a number* exactly when its Spark text casts
to a double, and a value's *text* is what ``from_json`` turns it into. Both were probed on the
project's Spark (4.x on a Java 17 runtime) and are reproduced here:

* text: a JSON string is its content (no quotes); ``true``/``false`` are ``"true"``/``"false"``;
  an integer is its decimal digits; a float is Java's ``Double.toString`` (``100.0``,
  ``1.0E-7``, ``1.23456789E8``), because Jackson re-renders floats through ``double``; a list or
  object is its compact JSON text (keys sorted, as :mod:`pubmesh.trace.writer` writes them).
* number: the text, trimmed of characters ≤ U+0020, parses with Java's ``Double.parseDouble``
  grammar (sign, digits with optional point and exponent, an optional ``f``/``d`` suffix, hex
  floats such as ``0x1p3``, ``NaN``, ``Infinity``) or is one of Spark's special literals
  (``inf``, ``+inf``, ``-inf``, ``infinity``, ``nan`` in any case). ``bool`` is never a number.
* numbers compare as doubles, with Spark's NaN rule: NaN equals NaN and is above every other
  value. :func:`number_key` turns a double into a key with that order.

Known residue: Java 17's ``Double.toString`` picks non-shortest digits for a handful of doubles
(``4.9E-324``); this module uses the shortest digits (Java ≥ 19). It matters only when a float
is compared *as text*, i.e. against an operand of the other kind.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["is_scalar", "java_double_text", "number_key", "number_of", "text_of"]

_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:(?P<dec>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+))[fFdD]?)",
    re.ASCII,
)
_JAVA_WHITESPACE = "".join(chr(c) for c in range(0x21))
_SPECIAL = {
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
    "nan": math.nan,
}
_JACKSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n"}
_JACKSON_ESCAPES |= {"\f": "\\f", "\r": "\\r"}


def is_scalar(value: object) -> bool:
    """A JSON string, number or boolean (what a filter operand may be)."""
    return isinstance(value, str | int | float)


def _parse_double(text: str) -> float | None:
    """Spark's ``try_cast(text as double)``: Java's grammar, then Spark's special literals."""
    trimmed = text.strip(_JAVA_WHITESPACE)
    match = _JAVA_DOUBLE.fullmatch(trimmed)
    if match is None:
        return _SPECIAL.get(trimmed.lower())
    body = trimmed.rstrip("fFdD") if match["dec"] or match["hex"] else trimmed
    if match["hex"]:
        return float.fromhex(body)
    return float(body)  # "NaN", "Infinity" and decimals all parse the same in Python


def number_of(value: object) -> float | None:
    """The double the analysis reads ``value`` as, or None when it is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.copysign(math.inf, value)
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return _parse_double(value)
    return None


def number_key(number: float) -> tuple[int, float]:
    """An ordering key with Spark's double semantics: NaN = NaN, NaN above everything."""
    return (1, 0.0) if math.isnan(number) else (0, number)


def java_double_text(number: float) -> str:
    """``Double.toString(number)`` (shortest digits): ``100.0``, ``0.001``, ``1.0E-7``."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if number == 0:
        return "-0.0" if math.copysign(1.0, number) < 0 else "0.0"
    sign = "-" if number < 0 else ""
    decimal = Decimal(repr(abs(number))).normalize()
    _, digit_tuple, exponent = decimal.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    point = len(digits) - 1 + exponent  # value = d.ddd × 10^point
    if 1e-3 <= abs(number) < 1e7:
        if point >= 0:
            whole = digits[: point + 1].ljust(point + 1, "0")
            return f"{sign}{whole}.{digits[point + 1 :] or '0'}"
        return f"{sign}0.{'0' * (-point - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point}"


def _json_string(text: str) -> str:
    out = []
    for char in text:
        escaped = _JACKSON_ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif char < " ":
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _json_text(value: Any) -> str:
    """Compact JSON the way Spark re-renders a nested value (floats in Java's style)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, Mapping):
        inner = ",".join(
            f"{_json_string(str(k))}:{_json_text(v)}" for k, v in sorted(value.items())
        )
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    return text_of(value)


def text_of(value: Any) -> str:
    """The text the analysis compares when a side is not a number (see the module doc)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double_text(value)
    if value is None or isinstance(value, Mapping | list | tuple):
        return _json_text(value)
    return json.dumps(value)
