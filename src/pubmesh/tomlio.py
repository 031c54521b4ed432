"""The project's one TOML writer (reading is :mod:`tomllib`'s job).

Scenario files are written back in canonical form (:func:`pubmesh.scenario.model.dump_toml`),
sweeps and ``pubmesh cluster`` hand values to the scenario loader as ``--set key=VALUE``
overrides, and the cluster passes stack parameters to its node processes the same way. All of
them write TOML here, so that whatever :mod:`tomllib` reads back is what was written:

* strings are basic strings (``"..."``) with backslash, quote and every control character
  escaped (``\\n``, ``\\t``, ``\\u007f``, ...); other characters are written as they are
  (UTF-8). A lone surrogate cannot be written at all and raises :class:`TomlWriteError`;
* floats are written with :func:`repr`, which round-trips, and ``inf``, ``-inf``, ``nan`` as
  TOML spells them; integers must fit TOML's signed 64 bits;
* keys are bare when they can be (``A-Za-z0-9_-``), quoted otherwise;
* lists are arrays; a list of tables at a table position is an array of tables
  (``[[name]]``); dicts are tables (``[name]``) or, inside arrays and inline tables or when the
  caller asks for it, inline tables (``{ k = v }``);
* dates, times and datetimes are written in RFC 3339 form (offsets in whole minutes).

:func:`dumps_value` writes one value (what goes right of ``=``); :func:`dumps` writes a
document. Keys are sorted unless an ``order`` says otherwise.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["TomlWriteError", "dumps", "dumps_key", "dumps_string", "dumps_value"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_ESCAPES = {
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}
#: characters a TOML basic string cannot hold as they are: controls, DEL, quote, backslash
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f\x7f"\\]')
_SURROGATE = re.compile(r"[\ud800-\udfff]")

#: ``inline(path)``: whether the table at ``path`` (its keys from the document's root; array
#: indices are left out) is written inline as ``key = { ... }`` rather than as ``[path]``
InlinePolicy = Callable[[tuple[str, ...]], bool]


class TomlWriteError(ValueError):
    """A value TOML cannot represent (a type it has no form for, an integer beyond 64 bits, a
    lone surrogate in a string, a non-string key)."""


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------
def dumps_string(text: str) -> str:
    """``text`` as a TOML basic string."""
    if _SURROGATE.search(text):
        raise TomlWriteError(f"cannot write {text!r} as TOML: it holds a lone surrogate")
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def dumps_key(key: str) -> str:
    """One key: bare when it can be, a basic string otherwise."""
    if not isinstance(key, str):
        raise TomlWriteError(f"cannot write {key!r} as a TOML key: keys are strings")
    return key if _BARE_KEY.fullmatch(key) else dumps_string(key)


def _dumps_float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)  # shortest text that reads back as the same float; TOML accepts it


def _dumps_datetime(value: datetime.date | datetime.time) -> str:
    if isinstance(value, datetime.datetime | datetime.time):
        offset = value.utcoffset()
        if offset is not None:
            if isinstance(value, datetime.time):
                raise TomlWriteError(f"cannot write {value!r} as TOML: a time has no offset")
            if offset.total_seconds() % 60:
                raise TomlWriteError(f"cannot write {value!r} as TOML: offset in seconds")
    return value.isoformat()


def dumps_value(value: Any) -> str:
    """One value as TOML (the right-hand side of ``key = value``); dicts are inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise TomlWriteError(f"cannot write {value} as TOML: integers are 64-bit")
        return str(value)
    if isinstance(value, float):
        return _dumps_float(value)
    if isinstance(value, str):
        return dumps_string(value)
    if isinstance(value, datetime.date | datetime.time):
        return _dumps_datetime(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(dumps_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        pairs = ", ".join(f"{dumps_key(k)} = {dumps_value(v)}" for k, v in _items(value, ()))
        return "{ " + pairs + " }"
    raise TomlWriteError(f"cannot write {value!r} as TOML ({type(value).__name__})")


# --------------------------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------------------------
def _items(table: Mapping[Any, Any], order: Sequence[str]) -> list[tuple[Any, Any]]:
    """The table's items: the keys named in ``order`` first (in that order), the rest sorted."""
    for key in table:
        if not isinstance(key, str):
            raise TomlWriteError(f"cannot write {key!r} as a TOML key: keys are strings")
    first = [k for k in order if k in table]
    rest = sorted(k for k in table if k not in first)
    return [(k, table[k]) for k in (*first, *rest)]


def _is_table_array(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(v, Mapping) for v in value)
    )


def dumps(
    data: Mapping[str, Any],
    *,
    order: Sequence[str] = (),
    inline: InlinePolicy | None = None,
) -> str:
    """``data`` as a TOML document.

    Within every table the plain keys come first, then the subtables (``[a.b]``) and arrays
    of tables (``[[a.c]]``); keys are sorted, except that the top-level keys named in
    ``order`` come first in that order. ``inline`` picks the tables written inline instead.
    Blocks are separated by a blank line and the text ends with one newline."""
    policy: InlinePolicy = inline or (lambda _path: False)
    blocks: list[list[str]] = []
    _table(data, (), None, blocks, policy, order)
    return "\n".join("\n".join(block) + "\n" for block in blocks)


def _table(
    table: Mapping[str, Any],
    path: tuple[str, ...],
    header: str | None,
    blocks: list[list[str]],
    inline: InlinePolicy,
    order: Sequence[str] = (),
) -> None:
    """Append the blocks of ``table`` at ``path``: its own (under ``header``, if any) and then
    those of its subtables and arrays of tables."""
    lines: list[str] = []
    children: list[tuple[str, Any]] = []  # subtables and arrays of tables, in key order
    for key, value in _items(table, order):
        if (isinstance(value, Mapping) or _is_table_array(value)) and not inline((*path, key)):
            children.append((key, value))
        else:
            lines.append(f"{dumps_key(key)} = {dumps_value(value)}")
    # a table with nothing but subtables needs no header of its own (they define it), but an
    # empty table does, or it would be lost; an array's item always does
    if header is not None and (lines or not children or header.startswith("[[")):
        blocks.append([header, *lines])
    elif lines:
        blocks.append(lines)
    for key, value in children:
        sub_path = (*path, key)
        if isinstance(value, Mapping):
            _table(value, sub_path, f"[{_dotted(sub_path)}]", blocks, inline)
        else:
            for item in value:
                _table(item, sub_path, f"[[{_dotted(sub_path)}]]", blocks, inline)


def _dotted(path: Iterable[str]) -> str:
    return ".".join(dumps_key(part) for part in path)
