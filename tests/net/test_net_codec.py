"""The wire codec, framing and the key handshake, without the runtime.

Every registered message type (the test stack's and every real stack's) round-trips through
the codec for values Hypothesis draws from its annotations; payloads of the wrong shape are
refused with the right reason; frames are cut correctly from arbitrary chunkings; MACs and
sequence numbers refuse tampered and replayed frames.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pubmesh.net import codec, security
from pubmesh.net.address import address_of, format_id, node_id, parse_hostport
from pubmesh.net.codec import CodecError, decode, encode
from pubmesh.net.framing import FrameBuffer, FrameError, FrameTooLarge, Opener, Sealer
from pubmesh.net.security import ClusterKey
from pubmesh.proto.core import (
    MESSAGE_INFO,
    MESSAGE_TAGS,
    MESSAGE_TYPES,
    Message,
    message_schema,
    register_message,
)
from pubmesh.stacks.base import available_stacks
from support.probestacks import Colour, NetTestKitchenSink, ProbeFlood, ProbePing

available_stacks()  # import every stack, so MESSAGE_TYPES holds every real message type

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------
# Strategies from annotations
# ------------------------------------------------------------------------------------------
def plain_values() -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats(allow_nan=False)
        | st.text(max_size=8)
        | st.binary(max_size=8)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=8,
    )


def strategy_for(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return plain_values()
    if tp is int:
        return st.integers(-(2**63), 2**64 - 1)
    if tp is float:
        return st.floats(allow_nan=False)
    if tp is str:
        return st.text(max_size=12)
    if tp is bytes:
        return st.binary(max_size=24)
    if tp is bool:
        return st.booleans()
    if tp is type(None):
        return st.none()
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy_for(a, depth) for a in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0], depth + 1), max_size=4).map(tuple)
        return st.tuples(*[strategy_for(a, depth + 1) for a in args])
    if origin is frozenset:
        return st.frozensets(strategy_for(args[0], depth + 1), max_size=4)
    if origin is list:
        return st.lists(strategy_for(args[0], depth + 1), max_size=4)
    if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
        key = strategy_for(args[0]) if args else st.text(max_size=4)
        value = strategy_for(args[1], depth + 1) if args else plain_values()
        return st.dictionaries(key, value, max_size=3)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and issubclass(tp, Message):
        if tp is Message:
            return messages_strategy(ProbePing, depth + 1)
        return messages_strategy(tp, depth + 1)
    raise AssertionError(f"no strategy for {tp!r}")


def messages_strategy(cls: type[Message], depth: int = 0) -> st.SearchStrategy[Message]:
    hints = typing.get_type_hints(cls)
    if depth > 3:
        return st.nothing()
    fields = {f.name: strategy_for(hints[f.name], depth) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


def all_types() -> list[type[Message]]:
    return [MESSAGE_TYPES[tag] for tag in sorted(MESSAGE_TYPES)]


# ------------------------------------------------------------------------------------------
# Codec
# ------------------------------------------------------------------------------------------
def test_every_registered_message_type_compiles() -> None:
    assert codec.check_all_message_types() == []
    names = {cls.__name__ for cls in all_types()}
    assert {"ProbeFlood", "NetTestKitchenSink"} <= names


@pytest.mark.parametrize("cls", all_types(), ids=lambda c: f"{c.__name__}")
def test_every_message_type_round_trips(cls: type[Message]) -> None:
    @SETTINGS
    @given(messages_strategy(cls))
    def round_trip(message: Message) -> None:
        tag, payload = encode(message)
        assert MESSAGE_TYPES[tag] is cls
        back = decode(tag, payload)
        assert back == _listify(message)
        assert type(back) is cls

    round_trip()


def _listify(message: Message) -> Message:
    """Any-typed arrays come back as lists (JSON-like); build the expected message that way."""
    hints = typing.get_type_hints(type(message))
    changes = {}
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        changes[f.name] = _expected(hints[f.name], value)
    return dataclasses.replace(message, **changes)


def _expected(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return _plain(value)
    if tp is float and isinstance(value, int):
        return float(value)
    if origin in (dict, Mapping, typing.Mapping) and len(args) == 2:
        return {k: _expected(args[1], v) for k, v in value.items()}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return tuple(_expected(args[0], v) for v in value)
    if isinstance(value, Message):
        return _listify(value)
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def kitchen_sink(**changes: Any) -> NetTestKitchenSink:
    base: dict[str, Any] = dict(
        number=7,
        ratio=0.5,
        flag=True,
        name="n",
        blob=b"b",
        maybe=None,
        either="e",
        ids=(1, 2),
        pair=("p", b"q"),
        members=frozenset({3}),
        attributes={"price": 10, "tags": ["a"]},
        counts={"x": 1},
        inner=ProbePing(seq=1),
        optional_inner=ProbeFlood(topic="t", pub_id=1, hops=0, payload=b""),
        colour=Colour.RED,
        mode="fast",
    )
    base.update(changes)
    return NetTestKitchenSink(**base)


def test_kitchen_sink_round_trips_exactly() -> None:
    message = kitchen_sink()
    assert decode(*encode(message)) == message


def _fields_of(message: Message) -> list[Any]:
    _tag, payload = encode(message)
    return list(msgpack.unpackb(payload, raw=False))


def _payload(values: list[Any]) -> bytes:
    return msgpack.packb(values, use_bin_type=True)


KITCHEN_TAG = encode(kitchen_sink())[0]
FIELD_INDEX = {f.name: i for i, f in enumerate(dataclasses.fields(NetTestKitchenSink))}


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("number", "7"),
        ("number", True),
        ("number", 1.5),
        ("ratio", "x"),
        ("flag", 1),
        ("name", b"bytes-not-str"),
        ("blob", "str-not-bytes"),
        ("maybe", "x"),
        ("either", 1.5),
        ("ids", [1, "2"]),
        ("ids", 5),
        ("pair", ["only-one"]),
        ("members", [[1]]),
        ("attributes", {1: "int key"}),
        ("attributes", "not a map"),
        ("counts", {"x": "1"}),
        ("inner", [93]),
        ("inner", [92, "t", 1, 0, b""]),
        ("optional_inner", [9999]),
        ("colour", "green"),
        ("mode", "medium"),
        ("pairs", [["a", "not-bytes"]]),
    ],
)
def test_wrong_field_types_are_refused(field: str, bad: Any) -> None:
    values = _fields_of(kitchen_sink())
    values[FIELD_INDEX[field]] = bad
    with pytest.raises(CodecError) as caught:
        decode(KITCHEN_TAG, _payload(values))
    assert caught.value.reason in ("wrong-field-type", "unknown-type")
    assert "NetTestKitchenSink" in str(caught.value)


def test_structural_errors_name_their_reason() -> None:
    values = _fields_of(kitchen_sink())
    with pytest.raises(CodecError, match="expected 17 fields"):
        decode(KITCHEN_TAG, _payload(values[:-1]))
    with pytest.raises(CodecError) as caught:
        decode(KITCHEN_TAG, b"\xc1")
    assert caught.value.reason == "undecodable"
    with pytest.raises(CodecError) as caught:
        decode(KITCHEN_TAG, _payload(values) + b"\x00")
    assert caught.value.reason == "undecodable"
    with pytest.raises(CodecError) as caught:
        decode(60_000, _payload(values))
    assert caught.value.reason == "unknown-type"
    with pytest.raises(CodecError) as caught:
        decode(KITCHEN_TAG, msgpack.packb({"number": 1}))
    assert caught.value.reason == "wrong-field-type"
    values[FIELD_INDEX["attributes"]] = {"t": msgpack.Timestamp(1, 0)}  # an extension type
    with pytest.raises(CodecError) as caught:
        decode(KITCHEN_TAG, _payload(values))
    assert caught.value.reason == "wrong-field-type"


def test_float_fields_accept_ints_and_stay_floats() -> None:
    values = _fields_of(kitchen_sink())
    values[FIELD_INDEX["ratio"]] = 3
    message = decode(KITCHEN_TAG, _payload(values))
    assert isinstance(message, NetTestKitchenSink)
    assert message.ratio == 3.0 and isinstance(message.ratio, float)
    assert not math.isnan(message.ratio)


@SETTINGS
@given(st.binary(max_size=200), st.sampled_from(sorted(MESSAGE_TYPES)))
def test_arbitrary_bytes_never_escape_as_anything_but_codec_errors(
    payload: bytes, tag: int
) -> None:
    try:
        message = decode(tag, payload)
    except CodecError:
        return
    assert type(message) is MESSAGE_TYPES[tag]


def _hash(message: Message) -> int | str:
    try:
        return hash(message)
    except TypeError as error:  # a message with a dict field
        return str(error)


def _outcome(build: Any, cls: type[Message], values: Any) -> tuple[str, Any]:
    try:
        return "ok", build(values)
    except CodecError as error:
        return "error", (error.reason, error.detail)


@pytest.mark.parametrize("cls", all_types(), ids=lambda c: f"{c.__name__}")
def test_generated_decoder_agrees_with_the_generic_one(cls: type[Message]) -> None:
    """decode's per-class generated builder (the fast path) gives what the generic ``_build``
    gives, message or error word for word (a message built through its slots is equal, hashes
    alike and stays frozen): on valid field arrays, on arrays with one field
    replaced by any plain value, and on arrays of the wrong length."""
    fast = codec._fast_builder(cls)
    count = len(dataclasses.fields(cls))

    @SETTINGS
    @given(messages_strategy(cls), st.integers(0, max(count - 1, 0)), plain_values())
    def agree(message: Message, index: int, junk: Any) -> None:
        values = tuple(msgpack.unpackb(encode(message)[1], raw=False, use_list=False))
        variants = [values, values[:-1], (*values, junk)]
        if count:
            packed = msgpack.unpackb(msgpack.packb(junk), raw=False, use_list=False)
            variants.append((*values[:index], packed, *values[index + 1 :]))
        for variant in variants:
            expected = _outcome(lambda v: codec._build(cls, v), cls, variant)
            got = _outcome(fast, cls, variant)
            assert got == expected, variant
            if got[0] == "ok":  # built through the slots, not __init__: the same object
                built, reference = got[1], expected[1]
                assert type(built) is cls and repr(built) == repr(reference)
                assert _hash(built) == _hash(reference)
                if count:
                    with pytest.raises(dataclasses.FrozenInstanceError):
                        setattr(built, dataclasses.fields(cls)[0].name, None)

    agree()


def _reference_checker(tp: Any) -> Any:
    """The array checks without the codec's fast paths: every value through its own check."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is not tuple:
        return codec._checker(tp)
    if len(args) == 2 and args[1] is Ellipsis:
        item = _reference_checker(args[0])

        def variadic(value: Any) -> Any:
            if type(value) is not tuple:
                raise codec._FieldError("not an array")
            return tuple(item(v) for v in value)

        return variadic
    items = [_reference_checker(a) for a in args]

    def fixed(value: Any) -> Any:
        if type(value) is not tuple or len(value) != len(items):
            raise codec._FieldError("not an array of that size")
        return tuple(check(v) for check, v in zip(items, value, strict=True))

    return fixed


ARRAY_TYPES = [
    tuple[int, ...],
    tuple[int, int],
    tuple[tuple[int, int], ...],
    tuple[str, bytes, bool],
    tuple[tuple[int, str], ...],
]


@SETTINGS
@given(
    st.one_of(
        plain_values(),
        st.lists(st.tuples(st.integers(-5, 2**64 - 1), st.integers(-5, 5) | st.booleans())),
        st.lists(st.integers(-(2**63), 2**64 - 1) | st.booleans(), max_size=6),
    )
)
def test_array_fast_paths_accept_and_refuse_what_the_per_value_checks_do(value: Any) -> None:
    """IHAVE's announcements and node lists skip the per-value checks when a whole-array type
    test passes; on anything msgpack can produce the result is what the per-value checks
    give (the same values, or a refusal)."""
    array = msgpack.unpackb(msgpack.packb(value), raw=False, use_list=False)
    for tp in ARRAY_TYPES:
        outcomes = []
        for check in (codec._checker(tp), _reference_checker(tp)):
            try:
                outcomes.append(("ok", check(array)))
            except codec._FieldError:
                outcomes.append(("refused", None))
        assert outcomes[0] == outcomes[1], (tp, array)


def test_unsupported_annotations_fail_when_compiled() -> None:
    @dataclasses.dataclass(frozen=True)
    class Weird(Message):
        thing: complex

    with pytest.raises(TypeError, match="cannot carry"):
        codec.compile_message(Weird)


# ------------------------------------------------------------------------------------------
# Explicit schemas
# ------------------------------------------------------------------------------------------
#: Tags of this module's schema probes, in the tests' range (1-99) below the 90-98 the other
#: test modules' probe messages use. 81 is never registered (its registrations must fail).
SCHEMA_TAG, MISMATCH_TAG, LATE_TAG = 80, 81, 82


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SchemaProbe(Message):
    """Annotated uselessly on purpose, as a class compiled with mypyc may be at run time:
    only its registration's ``fields=`` says what travels."""

    pub_id: Any
    peers: Any
    label: Any


#: SchemaProbe's schema, deliberately not in field order
SCHEMA_FIELDS: dict[str, Any] = {"peers": tuple[int, ...], "label": str | None, "pub_id": int}


def _schema_probe() -> type[SchemaProbe]:
    """SchemaProbe, registered on first use: at run time rather than import, so the tests
    parametrized over every registered type (collected at import) never meet its annotations."""
    if SchemaProbe not in MESSAGE_INFO:
        register_message(SchemaProbe, SCHEMA_TAG, layer="test", fields=SCHEMA_FIELDS)
    return SchemaProbe


def test_codec_reads_the_registered_schema_not_the_annotations() -> None:
    cls = _schema_probe()
    assert set(typing.get_type_hints(cls).values()) == {Any}
    assert message_schema(cls) == (
        ("pub_id", int),
        ("peers", tuple[int, ...]),
        ("label", str | None),
    )
    message = cls(pub_id=7, peers=(1, 2, 3), label="x")
    tag, payload = encode(message)
    assert tag == SCHEMA_TAG
    back = decode(tag, payload)
    assert back == message and type(back) is cls
    assert type(back.peers) is tuple  # an Any field would have come back as a list
    assert decode(*encode(cls(pub_id=1, peers=(), label=None))) == cls(
        pub_id=1, peers=(), label=None
    )
    index = {f.name: i for i, f in enumerate(dataclasses.fields(cls))}
    for field, bad in [("pub_id", "7"), ("pub_id", 1.5), ("peers", [1, "2"]), ("label", 5)]:
        values = _fields_of(message)
        values[index[field]] = bad  # each is a plain value, which Any would accept
        with pytest.raises(CodecError) as caught:
            decode(tag, _payload(values))
        assert caught.value.reason == "wrong-field-type"
        assert caught.value.detail.startswith(f"SchemaProbe.{field}: expected ")


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        ({"pub_id": int, "peers": tuple[int, ...]}, ["missing label"]),
        ({**SCHEMA_FIELDS, "hops": int}, ["not fields of the class: hops"]),
        ({"pub_id": int, "peers": tuple[int, ...], "lable": str}, ["missing label", "lable"]),
        ({}, ["missing pub_id, peers, label"]),
    ],
)
def test_fields_must_name_exactly_the_dataclass_fields(
    declared: dict[str, Any], named: list[str]
) -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Mismatched(Message):
        pub_id: int
        peers: tuple[int, ...]
        label: str | None

    with pytest.raises(TypeError) as caught:
        register_message(Mismatched, MISMATCH_TAG, layer="test", fields=declared)
    assert "Mismatched" in str(caught.value)
    for text in named:
        assert text in str(caught.value)
    assert MISMATCH_TAG not in MESSAGE_TYPES and Mismatched not in MESSAGE_INFO


@pytest.mark.parametrize("cls", all_types(), ids=lambda c: f"{c.__name__}")
def test_default_schema_is_the_annotations_in_field_order(cls: type[Message]) -> None:
    """Every message registered without ``fields=`` has, resolved at registration, the schema
    the codec used to read from its annotations."""
    hints = typing.get_type_hints(cls)
    expected = tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))
    assert MESSAGE_INFO[cls].schema == expected
    assert message_schema(cls) == expected


def test_annotations_that_do_not_resolve_yet_are_resolved_on_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Late(Message):
        ref: DefinedLater  # noqa: F821

    register_message(Late, LATE_TAG, layer="test")  # no error at registration
    try:
        assert MESSAGE_INFO[Late].schema is None
        with pytest.raises(TypeError, match="cannot resolve the annotations of Late"):
            message_schema(Late)
        with pytest.raises(TypeError, match="cannot resolve the annotations of Late"):
            codec.compile_message(Late)
        monkeypatch.setitem(globals(), "DefinedLater", int)
        assert message_schema(Late) == (("ref", int),)
        assert MESSAGE_INFO[Late].schema == (("ref", int),)
    finally:
        del MESSAGE_TYPES[LATE_TAG], MESSAGE_TAGS[Late], MESSAGE_INFO[Late]


# ------------------------------------------------------------------------------------------
# Addresses
# ------------------------------------------------------------------------------------------
def test_node_ids_pack_address_and_port() -> None:
    assert node_id("127.0.0.1", 7000) == (0x7F000001 << 16) | 7000
    assert address_of(node_id("10.1.2.3", 65535)) == ("10.1.2.3", 65535)
    assert format_id(node_id("127.0.0.1", 7000)) == "127.0.0.1:7000"
    assert format_id(3) == "0.0.0.0:3"
    assert parse_hostport("localhost:7000") == ("127.0.0.1", 7000)
    with pytest.raises(ValueError):
        address_of(1 << 48)


@pytest.mark.parametrize(
    "text",
    [
        "127.0.0.1",
        "127.0.0.1:",
        ":7000",
        "127.0.0.1:x",
        "127.0.0.1:70000",
        "0.0.0.0:7000",
        "no-such-host.invalid:7000",
    ],
)
def test_bad_addresses_are_user_errors(text: str) -> None:
    from pubmesh.errors import UserError

    with pytest.raises(UserError):
        parse_hostport(text, what="--listen")


# ------------------------------------------------------------------------------------------
# Framing and MACs
# ------------------------------------------------------------------------------------------
@SETTINGS
@given(
    st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=8),
    st.lists(st.integers(1, 64), min_size=1, max_size=20),
)
def test_frames_survive_any_chunking(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    buffer = FrameBuffer(limit=1000)
    got: list[bytes] = []
    position = 0
    index = 0
    while position < len(stream):
        step = cuts[index % len(cuts)]
        index += 1
        got.extend(buffer.feed(stream[position : position + step]))
        position += step
    assert [g[4:] for g in got] == bodies
    assert buffer.pending() == 0


def test_oversized_length_prefix_is_refused_before_the_body() -> None:
    buffer = FrameBuffer(limit=100)
    with pytest.raises(FrameTooLarge):
        buffer.feed((101).to_bytes(4, "big"))


def test_sealed_frames_open_in_order_and_refuse_tampering_and_replay() -> None:
    key = bytes(32)
    sealer, opener = Sealer(key), Opener(key)
    first = sealer.seal(92, b"payload-1", 1.5)
    second = sealer.seal(92, b"payload-2", 2.5)
    tag, t_send, payload = opener.open(first)
    assert (tag, t_send, bytes(payload)) == (92, 1.5, b"payload-1")
    with pytest.raises(FrameError) as caught:
        opener.open(first)
    assert caught.value.reason == "replayed-frame"
    assert bytes(opener.open(second)[2]) == b"payload-2"
    tampered = bytearray(sealer.seal(92, b"payload-3", 3.0))
    tampered[25] ^= 1
    with pytest.raises(FrameError) as caught:
        opener.open(bytes(tampered))
    assert caught.value.reason == "bad-mac"
    with pytest.raises(FrameError) as caught:
        Opener(bytes(range(32))).open(sealer.seal(92, b"x", 0.0))
    assert caught.value.reason == "bad-mac"
    with pytest.raises(FrameError) as caught:
        opener.open(b"\x00\x00\x00\x01\x01")
    assert caught.value.reason == "truncated-frame"


@SETTINGS
@given(st.binary(min_size=32, max_size=32), st.binary(min_size=16, max_size=300), st.integers(1, 9))
def test_sealed_frames_are_aes_gcm_with_the_header_as_associated_data(
    key: bytes, payload: bytes, frames: int
) -> None:
    """Frame version 3 encrypts the payload with AES-256-GCM, nonce = the sequence number,
    the 23-byte header as associated data: the standard's own decryption opens it, and the
    payload's bytes are nowhere in the frame."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    sealer = Sealer(key)
    for seq in range(frames):
        frame = sealer.seal(92, payload, 1.0)
        head = frame[:23]
        assert payload not in frame
        assert int.from_bytes(head[7:15], "big") == seq
        nonce = bytes(4) + seq.to_bytes(8, "big")
        assert AESGCM(key).decrypt(nonce, frame[23:], head) == payload


def test_handshake_proofs_bind_both_nonces_and_roles() -> None:
    key = ClusterKey(b"k" * 16)
    script = security.transcript(b"a" * 32, b"b" * 32, 1, 2)
    acceptor = key.proof(security.ACCEPTOR_LABEL, script)
    dialer = key.proof(security.DIALER_LABEL, script)
    assert acceptor != dialer
    other = security.transcript(b"a" * 32, b"c" * 32, 1, 2)
    assert key.proof(security.DIALER_LABEL, other) != dialer
    assert ClusterKey(b"j" * 16).proof(security.DIALER_LABEL, script) != dialer
    d2a, a2d = security.session_keys(key, script)
    assert d2a != a2d
    with pytest.raises(ValueError):
        ClusterKey(b"short")
