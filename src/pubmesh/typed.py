"""Values read into the types a dataclass declares: the one type-driven loader behind a
scenario's TOML tables (:mod:`pubmesh.scenario.model`) and the control channel's JSON lines
(:mod:`pubmesh.net.control`).

:func:`convert` turns a parsed value into a field's annotation: ``bool``, ``int``, ``float``,
``str``, ``Literal[...]``, ``list[X]``, ``tuple[X, ...]`` (from an array), ``dict[str, X]``,
``Any``, unions with ``None``, and a nested dataclass (from a table). A value of the wrong kind
raises the reader's error naming where it is, what was wanted and what came. The two readers
differ where their formats do, and a :class:`Dialect` says how:

* the error class and the wording (``[run] nodes: must be an integer, got 'x'`` in a scenario;
  ``publish: pub_id must be an int in [0, 2^63), got 'x'`` on the control channel, where a field
  may say what it wants in its metadata, ``must``);
* TOML has ``inf`` and ``nan``, which no scenario value may be (``finite``);
* a JSON value of a union is tried against each arm in turn; a TOML value is read as the union's
  one non-None arm (scenario fields are never wider);
* a wrong element of a JSON list is reported as the whole list being wrong (the field's own
  words say what it wants); a scenario names the element's problem;
* a type the reader does not know is a bug in the control channel (TypeError), and passes
  through unchecked in a scenario (a table the stack validates itself).

Reading a whole record (unknown keys, missing ones, checks after construction) stays with each
reader: those are the formats' rules, not the types'.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

__all__ = ["KINDS", "Dialect", "convert"]

#: how both readers name the scalar kinds in an error (each says ``str`` its own way)
KINDS: dict[Any, str] = {bool: "true or false", int: "an integer", float: "a number"}


@dataclass(frozen=True)
class Dialect:
    """How one reader words and decides what :func:`convert` leaves open (module docstring)."""

    #: the exception a wrong value raises
    error: type[Exception]
    #: the message for a value at ``where`` that is not ``wanted`` (a description of the type)
    wrong: Callable[[str, str, Any], str]
    #: a type's description in that message
    describe: Callable[[Any], str]
    #: floats must be finite
    finite: bool = False
    #: a union's value is tried against each arm (else read as its one non-None arm)
    each_arm: bool = False
    #: a list with a wrong element is named whole (else the element's own error stands)
    whole_lists: bool = False
    #: a type the dialect does not know raises TypeError (else the value passes unchecked)
    strict: bool = False
    #: builds a nested dataclass from a table: ``table(cls, value, where)``; None: no nesting
    table: Callable[[type, Any, str], Any] | None = None


def convert(value: Any, tp: Any, where: str, dialect: Dialect, must: str | None = None) -> Any:
    """``value`` read as type ``tp``, or ``dialect.error``; ``must`` replaces the type's
    description in the message (a field's own words)."""

    def wrong(wanted: str | None = None) -> Exception:
        return dialect.error(dialect.wrong(where, wanted or must or dialect.describe(tp), value))

    if tp is Any:
        return value
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        arms = [a for a in args if a is not type(None)]
        if not dialect.each_arm:
            return convert(value, arms[0], where, dialect, must)
        for arm in arms:
            try:
                return convert(value, arm, where, dialect)
            except dialect.error:
                continue
        raise wrong()
    if origin is Literal:
        if value not in get_args(tp):
            raise wrong()
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise wrong()
        return value
    if tp is int:
        if type(value) is not int:
            raise wrong()
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong()
        if dialect.finite and not math.isfinite(float(value)):
            raise wrong("a finite number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise wrong()
        return value
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise wrong()
        item = get_args(tp)[0]
        try:
            items = [convert(v, item, where, dialect) for v in value]
        except dialect.error:
            if not dialect.whole_lists:
                raise
            raise wrong() from None
        return items if origin is list else tuple(items)
    if origin is dict:
        _key, item = get_args(tp)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise wrong()
        return {k: convert(v, item, f"{where}[...]", dialect) for k, v in value.items()}
    if dialect.table is not None and dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return dialect.table(tp, value, where)
    if dialect.strict:
        raise TypeError(f"no reader for {tp!r}")  # a bug in the reader, not in the input
    return value
