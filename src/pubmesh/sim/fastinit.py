"""Faster construction of the messages and outputs the simulator's hot path builds.

A frozen dataclass's generated ``__init__`` stores each field with ``object.__setattr__(self,
name, value)``, which looks the name up again on every call (its own ``__setattr__`` refuses).
Every message a handler sends and every :class:`~pubmesh.proto.core.Send` wrapping it is built
that way, millions of times a run: a six-field ``Linearize`` took 965 ns and a ``Send`` 398
(CPython 3.11, a loop of 10^6), against 723 and 164 through the slot descriptors. So when a
simulation is built, :func:`install` gives every registered message class, every timer class
and the outputs ``Send``, ``Deliver`` and ``SetTimer`` an ``__init__`` of the same signature
that stores through the descriptors (:func:`fast_init`); traces are unchanged, byte for byte.

It lives here, not beside ``register_message``: generating the function takes ``exec``, which
``proto/`` does not use (tools/lint_sansio.py). The TCP runtime keeps the generated
``__init__``; its costs are the network's.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import fields
from types import FunctionType
from typing import Any, TypeVar

from pubmesh.proto.core import MESSAGE_INFO, Deliver, Send, SetTimer, Timer

T = TypeVar("T")

#: the classes :func:`install` has handled (given a fast ``__init__`` or left as they are)
_DONE: set[type] = set()


def install() -> None:
    """:func:`fast_init` on every message class registered so far, every timer class defined
    so far (a subclass of :class:`~pubmesh.proto.core.Timer`, at any depth) and the hot
    outputs; a class already handled is skipped, so a new simulation pays only for new ones."""
    timers: list[type[Timer]] = []
    pending: list[type[Timer]] = [Timer]
    while pending:
        subclasses: list[type[Timer]] = pending.pop().__subclasses__()
        timers.extend(subclasses)
        pending.extend(subclasses)
    for cls in (*MESSAGE_INFO, *timers, Send, Deliver, SetTimer):
        if cls not in _DONE:
            fast_init(cls)
            _DONE.add(cls)


def fast_init(cls: type[T]) -> type[T]:
    """Give a frozen, slotted dataclass an ``__init__`` that stores its fields through their
    slot descriptors, with the generated one's signature (the same parameters, kinds and
    defaults). Values, equality, ``repr``, hashing and immutability stay the dataclass's own.

    A class it cannot mirror exactly is returned unchanged: a ``__post_init__``, an init-only
    or ``init=False`` field, a default factory, a field without a slot descriptor, or an
    ``__init__`` that is not a generated Python function (a class mypyc compiled)."""
    init = cls.__dict__.get("__init__")
    params = getattr(cls, "__dataclass_params__", None)
    if (
        not isinstance(init, FunctionType)
        or params is None
        or not params.frozen
        or hasattr(cls, "__post_init__")
    ):
        return cls
    parameters = list(inspect.signature(init).parameters.values())[1:]
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]  # a dataclass, checked above
    if [p.name for p in parameters] != names or any(
        f.default_factory is not dataclasses.MISSING or not f.init
        for f in fields(cls)  # type: ignore[arg-type]
    ):
        return cls
    env: dict[str, Any] = {}
    signature: list[str] = []
    keyword_only = False
    for p in parameters:
        descriptor: Any = getattr(cls, p.name, None)
        if type(descriptor).__name__ != "member_descriptor":
            return cls
        env[f"_set_{p.name}"] = descriptor.__set__
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not keyword_only:
            signature.append("*")
            keyword_only = True
        if p.default is inspect.Parameter.empty:
            signature.append(p.name)
        else:
            env[f"_default_{p.name}"] = p.default
            signature.append(f"{p.name}=_default_{p.name}")
    body = "".join(f"    _set_{name}(self, {name})\n" for name in names) or "    pass\n"
    source = f"def __init__(self, {', '.join(signature)}):\n{body}"
    exec(compile(source, f"<fast __init__ of {cls.__name__}>", "exec"), env)
    fn = env["__init__"]
    fn.__qualname__ = f"{cls.__qualname__}.__init__"
    fn.__module__ = cls.__module__
    fn.__doc__ = init.__doc__
    cls.__init__ = fn  # type: ignore[method-assign]
    return cls
