"""The trace's message-size estimate, compiled once per message class for the simulator.

:meth:`pubmesh.proto.core.Message.wire_size` walks a message's fields and sizes each value by
its type (8 bytes per number, 2 + length per string or bytes, 1 per flag, 2 + the members per
container, plus an 8-byte header). The simulator calls it for every message it carries, and the
walk was ~14% of a gossip run's time. :func:`size_function` builds, once per class, a function
that computes the same figure in one expression from the field types of the class's registered
schema (:func:`pubmesh.proto.core.message_schema`, by default its annotations):

==============================  ==============================================
declared                        cost
==============================  ==============================================
``int``, ``float``              8
``bool``                        1
``str``, ``bytes``              2 + len
``tuple[X, ...]``, X fixed      2 + len × size(X) (X: a number, a flag, or a
                                fixed tuple of those, e.g. ``tuple[int, int]``)
``tuple[X, ...]``, other X      2 + the sum of size(X) over the members, with
                                size(X) an expression of the member: strings,
                                nested tuples and ``X | None`` (1 for None)
``tuple[A, B, ...]``            2 + size(A) + size(B) + ...
anything else                   the generic walk (``estimate_size``)
==============================  ==============================================

Each simple field is checked by exact type at run time and falls back to the walk if it holds
something else, so a message built with values of other types (a test's junk) is still sized
as the walk sizes it; the elements of a declared tuple are taken as declared. A test checks the
two agree on every registered message class.

The members' expressions matter for brokertree: a subscription summary is a tuple of
``(origin, topic, filter, seqVect, seq)`` tuples, and walking it value by value was a fifth of
a brokertree simulation's time.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from pubmesh.proto.core import HEADER_BYTES, ID_BYTES, Message, estimate_size, message_schema

#: message class -> its size function (filled on first use)
SIZES: dict[type, Callable[[Any], int]] = {}


def _fixed_size(tp: Any) -> int | None:
    """Bytes of one value of type ``tp`` if every value of it has the same size, else None."""
    if tp is int or tp is float:
        return ID_BYTES
    if tp is bool:
        return 1
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if args and args[-1] is not Ellipsis:
            sizes = [_fixed_size(a) for a in args]
            if all(s is not None for s in sizes):
                return 2 + sum(s for s in sizes if s is not None)
    return None


def _value_size(tp: Any, v: str, depth: int = 0) -> str | None:
    """An expression for the size of the value named ``v``, taken to be of type ``tp`` (as the
    walk would size it), or None where only the walk knows (a mapping, ``Any``, a union other
    than ``X | None``). ``depth`` names the loop variables of nested tuples apart."""
    fixed = _fixed_size(tp)
    if fixed is not None:
        return str(fixed)
    if tp is str or tp is bytes:
        return f"(2 + len({v}))"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = _value_size(args[0] if args[1] is type(None) else args[1], v, depth)
        return None if inner is None else f"(1 if {v} is None else {inner})"
    if origin is not tuple or not args:
        return None
    if args[-1] is Ellipsis:
        member = f"e{depth}"
        inner = _value_size(args[0], member, depth + 1)
        return None if inner is None else f"(2 + sum([{inner} for {member} in {v}]))"
    parts = [_value_size(arg, f"{v}[{i}]", depth) for i, arg in enumerate(args)]
    if any(part is None for part in parts):
        return None
    return "(2 + " + " + ".join(typing.cast(list[str], parts)) + ")"


def size_function(cls: type[Message]) -> Callable[[Any], int]:
    """The size estimate of ``cls``'s messages, built once and cached in :data:`SIZES`."""
    fn = SIZES.get(cls)
    if fn is not None:
        return fn
    try:
        hints = dict(message_schema(cls))
    except TypeError:  # a schema that does not resolve: size every field by the walk
        hints = {}
    terms: list[str] = [str(HEADER_BYTES)]
    for f in dataclasses.fields(cls):
        tp = hints.get(f.name)
        v = f"m.{f.name}"
        if tp is int or tp is float:
            terms.append(f"({ID_BYTES} if type({v}) is {tp.__name__} else estimate_size({v}))")
        elif tp is bool:
            terms.append(f"(1 if type({v}) is bool else estimate_size({v}))")
        elif tp is str or tp is bytes:
            terms.append(f"(2 + len({v}) if type({v}) is {tp.__name__} else estimate_size({v}))")
        elif typing.get_origin(tp) is tuple and typing.get_args(tp)[-1:] == (Ellipsis,):
            each = _fixed_size(typing.get_args(tp)[0])
            sized = f"2 + {each} * len({v})" if each is not None else _value_size(tp, v)
            if sized is not None:
                terms.append(f"({sized} if type({v}) is tuple else estimate_size({v}))")
            else:
                terms.append(f"estimate_size({v})")
        else:
            terms.append(f"estimate_size({v})")
    source = "def size(m):\n    return " + " + ".join(terms) + "\n"
    env: dict[str, Any] = {"estimate_size": estimate_size}
    exec(compile(source, f"<size of {cls.__name__}>", "exec"), env)
    fn = typing.cast(Callable[[Any], int], env["size"])
    SIZES[cls] = fn
    return fn
