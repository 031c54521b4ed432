"""The wire codec: every registered message type, in msgpack, checked against its schema.

How it works
============
A message travels as its type tag (in the frame header, see :mod:`pubmesh.net.framing`) and a
msgpack array of its field values *in dataclass field order*; field names never go on the wire.
The codec is generic over :data:`pubmesh.proto.core.MESSAGE_TYPES`: nothing is written per
message type. For each class the first use compiles, from the field types of the class's
registered schema (:func:`pubmesh.proto.core.message_schema`: its annotations unless it was
registered with explicit ``fields=``), one small checking function per field, and decoding is:
unpack the msgpack array, check its length against the number of fields, run each field's
checker, build the dataclass. The codec never reads a class's annotations itself.

What a field may be (anything else is refused when the class is first compiled, so a stack that
declares an unsupported field fails its codec test rather than at runtime):

==========================================  ==================================================
field type                                  on the wire / accepted on decode
==========================================  ==================================================
``int``                                     msgpack int (a ``bool`` is *not* an int here)
``float``                                   msgpack float, or int (widened to float)
``str``, ``bytes``, ``bool``, ``None``      str, bin, bool, nil
``X | Y``, ``Optional[X]``                  the first alternative that accepts the value
``Literal[a, b]``                           one of the listed values
``tuple[X, ...]``, ``tuple[X, Y]``          array (any length / exactly that length)
``frozenset[X]``, ``list[X]``               array
``Mapping[K, V]``, ``dict[K, V]``           map whose keys check as K and values as V
``Any``                                     a *plain value*: nil, bool, int, float, str, bin,
                                            array (decoded as a list) or map with str keys
``Enum`` subclass                           its ``value``
a ``Message`` subclass                      array ``[tag, field, field, ...]``; the tag must
                                            name that class or a subclass of it
==========================================  ==================================================

The one rule that keeps it safe: **nothing received is trusted until it has been checked
against the declared type of the field it lands in.** msgpack only ever produces plain data
(no pickle, no eval, no object construction beyond the dataclass being decoded); a value of the
wrong type, an array of the wrong length, an unknown nested tag, an extension type, a map key
that is not a string: :class:`CodecError` with a ``reason`` the runtime traces before it drops
the connection (docs/design.md, Invariants).

Encoding trusts the local protocol (its values are already of the declared types) and costs one
``msgpack.packb`` per message; nested messages and frozensets go through msgpack's ``default``
hook.
"""

from __future__ import annotations

import enum
import inspect
import operator
import threading
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

import msgpack

from pubmesh.proto.core import MESSAGE_TAGS, MESSAGE_TYPES, Message, message_schema

Checker = Callable[[Any], Any]

#: Nesting allowed in ``Any`` values (maps and arrays inside attribute mappings).
MAX_PLAIN_DEPTH = 32

#: Bytes (UTF-8) a topic may take: a message naming a longer one does not decode
#: (``topic-too-long``: a malformed frame, its sender charged), and a subscription or
#: publication on one is refused (pubmesh.net.admission).
#: Kafka allows 249 characters; a topic is a name, not a payload, and a member must not fill
#: others' memory with long ones.
MAX_TOPIC_BYTES = 255


def topic_too_long(topic: str) -> bool:
    return len(topic) > MAX_TOPIC_BYTES // 4 and len(topic.encode()) > MAX_TOPIC_BYTES


class CodecError(ValueError):
    """A payload that is not a valid encoding of its message type.

    ``reason`` is one of ``"undecodable"`` (not msgpack, or trailing bytes), ``"unknown-type"``
    (a tag no class is registered under), ``"wrong-field-type"`` (anything that fails a
    field's declared type) and ``"topic-too-long"`` (a topic over :data:`MAX_TOPIC_BYTES`);
    ``detail`` says which field and what arrived.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class _FieldError(Exception):
    """Raised by checkers; turned into a CodecError naming the message and the field."""


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------
def _default(value: Any) -> Any:
    """msgpack's hook for what it does not know: nested messages, sets, enums."""
    if isinstance(value, Message):
        tag = MESSAGE_TAGS[type(value)]
        return [tag, *[getattr(value, name) for name in _field_names(type(value))]]
    if isinstance(value, frozenset | set):
        return list(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"the codec cannot encode {type(value).__name__} value {value!r}")


_PACKER_OPTIONS: dict[str, Any] = {"use_bin_type": True, "default": _default}
#: one msgpack Packer per thread (``packb`` builds a Packer per call: a third of its cost);
#: per thread because ``_default`` runs Python code in the middle of a ``pack``
_PACKERS = threading.local()
#: class -> (tag, a function from the message to its field values in field order)
_ENCODERS: dict[type, tuple[int, Callable[[Any], tuple[Any, ...]]]] = {}


def encode(message: Message) -> tuple[int, bytes]:
    """``(tag, payload)`` of a message: its type tag and its fields as a msgpack array."""
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        encoder = _encoder(type(message))
    tag, values = encoder
    try:
        packer = _PACKERS.packer
    except AttributeError:
        packer = _PACKERS.packer = msgpack.Packer(**_PACKER_OPTIONS)
    return tag, packer.pack(values(message))


def _encoder(cls: type) -> tuple[int, Callable[[Any], tuple[Any, ...]]]:
    try:
        tag = MESSAGE_TAGS[cls]
    except KeyError:
        raise TypeError(f"{cls.__name__} is not a registered message (use @message)") from None
    names = _field_names(cls)
    values: Callable[[Any], tuple[Any, ...]]
    if len(names) >= 2:
        values = operator.attrgetter(*names)
    elif names:
        name = names[0]

        def values(message: Any) -> tuple[Any, ...]:
            return (getattr(message, name),)

    else:

        def values(message: Any) -> tuple[Any, ...]:
            return ()

    encoder = _ENCODERS[cls] = (tag, values)
    return encoder


_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------
def decode(tag: int, payload: bytes | memoryview) -> Message:
    """The message of type ``tag`` encoded in ``payload``; :class:`CodecError` if it is not."""
    decoder = _DECODERS.get(tag)
    if decoder is None:
        cls = MESSAGE_TYPES.get(tag)
        if cls is None:
            raise CodecError("unknown-type", f"no message type has tag {tag}")
        decoder = _DECODERS[tag] = (cls, _fast_builder(cls), _topic_index(cls))
    try:
        values = msgpack.unpackb(payload, raw=False, use_list=False, strict_map_key=False)
    except (ValueError, TypeError) as error:  # msgpack's errors are ValueErrors
        cls = decoder[0]
        raise CodecError("undecodable", f"{cls.__name__}: {type(error).__name__} {error}") from None
    at = decoder[2]
    if at is not None and type(values) is tuple and len(values) > at:
        topic = values[at]
        if type(topic) is str and topic_too_long(topic):
            raise CodecError("topic-too-long", f"a topic of {len(topic.encode()):,} bytes")
    return decoder[1](values)


def _topic_index(cls: type[Message]) -> int | None:
    """Where ``cls``'s fields hold a ``topic: str`` (checked against :data:`MAX_TOPIC_BYTES`
    before the message is built), or None."""
    for index, (name, tp) in enumerate(message_schema(cls)):
        if name == "topic" and tp is str:
            return index
    return None


#: tag -> (class, its builder from :func:`_fast_builder`, where its topic is: _topic_index)
_DECODERS: dict[int, tuple[type[Message], Callable[[Any], Message], int | None]] = {}
#: field types checked by ``type(value) is T`` alone (what their checkers do, inlined)
_EXACT = (int, str, bytes, bool)


def _fast_builder(cls: type[Message]) -> Callable[[Any], Message]:
    """:func:`_build` for ``cls`` as one generated function: the array's shape and the fields
    whose check is an exact type test are checked inline, the other fields go through their
    checkers, and the message is built without a dict in between. Whatever the
    fast path does not accept goes to :func:`_build`, which accepts exactly the same values
    and words the error; so the two never disagree (the codec tests run both).

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: 2.1 µs
    for GOSSIP's four fields here, the largest single cost of a decode. Where every field is
    a slot of a pure-Python class without ``__post_init__`` (every message class, unless
    compiled by ``make compiled``), the builder allocates the object and sets the slots
    through their descriptors (0.85 µs): the same fields, so the same equality and hash, and
    the class stays frozen for everyone else."""
    plan = _plan(cls)
    hints = dict(message_schema(cls))
    names = [name for name, _check in plan]
    env: dict[str, Any] = {
        "cls": cls,
        "slow": _build,
        "FieldError": _FieldError,
        "CodecError": CodecError,
    }
    tests = []
    arguments = []
    for i, (name, check) in enumerate(plan):
        tp = hints[name]
        if tp in _EXACT:
            env[f"t{i}"] = tp
            tests.append(f"type(v{i}) is t{i}")
            arguments.append(f"v{i}")
        else:
            env[f"c{i}"] = check
            arguments.append(f"c{i}(v{i})")
    unpack = "".join(f"v{i}, " for i in range(len(names)))
    lines = ["def build(values):"]
    lines.append(f"    if type(values) is tuple and len(values) == {len(names)}:")
    indent = "        "
    if names:
        lines.append(f"{indent}{unpack}= values")
    if tests:
        lines.append(f"{indent}if {' and '.join(tests)}:")
        indent += "    "
    setters = _slot_setters(cls, names)
    if setters is None:
        keywords = ", ".join(f"{n}={a}" for n, a in zip(names, arguments, strict=True))
        construct = [f"return cls({keywords})"]
    else:
        env["new"] = object.__new__
        construct = ["o = new(cls)"]
        for i, (argument, setter) in enumerate(zip(arguments, setters, strict=True)):
            env[f"s{i}"] = setter
            construct.append(f"s{i}(o, {argument})")
        construct.append("return o")
    lines += [
        f"{indent}try:",
        *(f"{indent}    {line}" for line in construct),
        f"{indent}except (FieldError, CodecError, TypeError, ValueError):",
        f"{indent}    pass",
        "    return slow(cls, values)",
    ]
    exec("\n".join(lines), env)  # the source is built above from field names only
    builder: Callable[[Any], Message] = env["build"]
    return builder


def _slot_setters(cls: type[Message], names: list[str]) -> list[Callable[[Any, Any], None]] | None:
    """The ``__set__`` of each field's slot descriptor, in order, or None when the class must
    be built through its ``__init__`` (a ``__post_init__``, a field that is not a plain slot:
    a class compiled by mypyc has none; a field its ``__init__`` does not take)."""
    if hasattr(cls, "__post_init__"):
        return None
    declared = fields(cls)
    if [f.name for f in declared] != names or not all(f.init for f in declared):
        return None
    setters = []
    for name in names:
        descriptor = inspect.getattr_static(cls, name, None)
        if type(descriptor) is not types.MemberDescriptorType:
            return None
        setters.append(descriptor.__set__)
    return setters


def _build(cls: type[Message], values: Any) -> Message:
    plan = _plan(cls)
    if type(values) is not tuple:
        raise CodecError("wrong-field-type", f"{cls.__name__}: fields must be an array")
    if len(values) != len(plan):
        raise CodecError(
            "wrong-field-type",
            f"{cls.__name__}: expected {len(plan)} fields, got {len(values)}",
        )
    kwargs: dict[str, Any] = {}
    for (name, check), value in zip(plan, values, strict=True):
        try:
            kwargs[name] = check(value)
        except _FieldError as error:
            raise CodecError("wrong-field-type", f"{cls.__name__}.{name}: {error}") from None
        except CodecError as error:  # from a nested message
            raise CodecError(error.reason, f"{cls.__name__}.{name}: {error.detail}") from None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:  # a __post_init__ that validates
        raise CodecError("wrong-field-type", f"{cls.__name__}: {error}") from None


_PLANS: dict[type, tuple[tuple[str, Checker], ...]] = {}


def _plan(cls: type[Message]) -> tuple[tuple[str, Checker], ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = compile_message(cls)
    return plan


def compile_message(cls: type[Message]) -> tuple[tuple[str, Checker], ...]:
    """One checker per field of ``cls``, from its schema (:func:`message_schema`). Raises
    TypeError for a field type the codec cannot carry, or a schema that does not resolve (so
    that a test over MESSAGE_TYPES catches it)."""
    plan = []
    for name, tp in message_schema(cls):
        try:
            plan.append((name, _checker(tp)))
        except TypeError as error:
            raise TypeError(f"{cls.__name__}.{name}: {error}") from None
    return tuple(plan)


def check_all_message_types() -> list[str]:
    """Compile every registered message type; the names of those that failed, with why."""
    problems = []
    for tag in sorted(MESSAGE_TYPES):
        try:
            _plan(MESSAGE_TYPES[tag])
        except TypeError as error:
            problems.append(f"tag {tag}: {error}")
    return problems


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _checker(tp: Any) -> Checker:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    if tp is Any:
        return _plain_checker(0)
    if tp is int:

        def check_int(value: Any) -> Any:
            if type(value) is not int:
                raise _FieldError(f"expected int, got {_describe(value)}")
            return value

        return check_int
    if tp is float:

        def check_float(value: Any) -> Any:
            kind = type(value)
            if kind is float:
                return value
            if kind is int:
                return float(value)
            raise _FieldError(f"expected float, got {_describe(value)}")

        return check_float
    if tp in (str, bytes, bool):
        expected = tp

        def check_exact(value: Any) -> Any:
            if type(value) is not expected:
                raise _FieldError(f"expected {expected.__name__}, got {_describe(value)}")
            return value

        return check_exact
    if tp is None or tp is type(None):

        def check_none(value: Any) -> Any:
            if value is not None:
                raise _FieldError(f"expected None, got {_describe(value)}")
            return None

        return check_none
    if origin is typing.Literal:
        allowed = args

        def check_literal(value: Any) -> Any:
            for option in allowed:
                if type(value) is type(option) and value == option:
                    return option
            raise _FieldError(f"expected one of {allowed!r}, got {_describe(value)}")

        return check_literal
    if origin in (typing.Union, types.UnionType):
        return _union_checker(args)
    if origin is tuple:
        return _tuple_checker(args)
    if origin in (frozenset, list, set):
        item = _checker(args[0]) if args else _plain_checker(1)
        build: Callable[[Any], Any] = frozenset if origin in (frozenset, set) else list

        def check_collection(value: Any) -> Any:
            if type(value) is not tuple:
                raise _FieldError(f"expected an array, got {_describe(value)}")
            try:
                return build(item(v) for v in value)
            except TypeError as error:  # unhashable member of a frozenset
                raise _FieldError(str(error)) from None

        return check_collection
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        key_check = _checker(args[0]) if args else _checker(str)
        value_check = _checker(args[1]) if args else _plain_checker(1)

        def check_map(value: Any) -> Any:
            if type(value) is not dict:
                raise _FieldError(f"expected a map, got {_describe(value)}")
            return {key_check(k): value_check(v) for k, v in value.items()}

        return check_map
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        enum_type = tp

        def check_enum(value: Any) -> Any:
            try:
                return enum_type(value)
            except (ValueError, TypeError):
                raise _FieldError(f"no {enum_type.__name__} has value {_describe(value)}") from None

        return check_enum
    if isinstance(tp, type) and issubclass(tp, Message):
        return _message_checker(tp)
    raise TypeError(f"the codec cannot carry fields of type {tp!r}")


def _union_checker(args: tuple[Any, ...]) -> Checker:
    optional = type(None) in args
    rest = [a for a in args if a is not type(None)]
    checkers = [_checker(a) for a in rest]
    if optional and len(checkers) == 1:
        (only,) = checkers

        def check_optional(value: Any) -> Any:
            return None if value is None else only(value)

        return check_optional

    def check_union(value: Any) -> Any:
        if value is None and optional:
            return None
        for check in checkers:
            try:
                return check(value)
            except (_FieldError, CodecError):
                continue
        raise _FieldError(f"expected {' | '.join(map(_type_text, args))}, got {_describe(value)}")

    return check_union


def _type_text(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp)


def _tuple_checker(args: tuple[Any, ...]) -> Checker:
    """Arrays as tuples. Where every value's check is an exact type test (``tuple[int, ...]``,
    ``tuple[int, int]``, ``tuple[tuple[int, int], ...]``: node lists, IHAVE's announcements),
    a fast test over the whole array comes first and the array is kept as msgpack made it;
    what it does not accept goes through the per-value checkers, which word the error."""
    if len(args) == 2 and args[1] is Ellipsis:
        item = _checker(args[0])
        exact_item = _exact_test(args[0])

        def check_variadic(value: Any) -> Any:
            if type(value) is not tuple:
                raise _FieldError(f"expected an array, got {_describe(value)}")
            if exact_item is not None and exact_item(value):
                return value
            return tuple([item(v) for v in value])

        return check_variadic
    if not args:
        return _tuple_checker((Any, Ellipsis))
    items = [_checker(a) for a in args]
    size = len(items)
    exact = tuple(args) if all(a in _EXACT for a in args) else None

    def check_fixed(value: Any) -> Any:
        if type(value) is not tuple or len(value) != size:
            raise _FieldError(f"expected an array of {size}, got {_describe(value)}")
        if exact is not None and tuple(map(type, value)) == exact:
            return value
        return tuple([check(v) for check, v in zip(items, value, strict=True)])

    return check_fixed


def _exact_test(tp: Any) -> Callable[[tuple[Any, ...]], bool] | None:
    """For an array's item type: a test that every item of an array passes its check as it
    is, when that check is an exact type test (or a fixed tuple of them); else None."""
    if tp in _EXACT:
        kind = tp

        def all_exact(values: tuple[Any, ...]) -> bool:
            return all(type(v) is kind for v in values)

        return all_exact
    args = typing.get_args(tp)
    if typing.get_origin(tp) is tuple and args and all(a in _EXACT for a in args):
        kinds = tuple(args)

        def all_exact_tuples(values: tuple[Any, ...]) -> bool:
            return all(type(v) is tuple and tuple(map(type, v)) == kinds for v in values)

        return all_exact_tuples
    return None


def _message_checker(base: type[Message]) -> Checker:
    def check_message(value: Any) -> Any:
        if type(value) is not tuple or not value or type(value[0]) is not int:
            raise _FieldError(f"expected a nested message [tag, ...], got {_describe(value)}")
        cls = MESSAGE_TYPES.get(value[0])
        if cls is None:
            raise CodecError("unknown-type", f"no message type has tag {value[0]}")
        if not issubclass(cls, base):
            raise _FieldError(f"tag {value[0]} ({cls.__name__}) is not a {base.__name__}")
        return _build(cls, value[1:])

    return check_message


def _plain_checker(depth: int) -> Checker:
    """Plain JSON-like values for ``Any``: arrays come back as lists, map keys must be str."""

    def check_plain(value: Any, depth: int = depth) -> Any:
        kind = type(value)
        if value is None or kind in (bool, int, float, str, bytes):
            return value
        if depth >= MAX_PLAIN_DEPTH:
            raise _FieldError("plain value nested too deeply")
        if kind is tuple:
            return [check_plain(v, depth + 1) for v in value]
        if kind is dict:
            out = {}
            for k, v in value.items():
                if type(k) is not str:
                    raise _FieldError(f"map keys must be str, got {_describe(k)}")
                out[k] = check_plain(v, depth + 1)
            return out
        raise _FieldError(f"expected a plain value, got {_describe(value)}")

    return check_plain
