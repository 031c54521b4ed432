"""The layer contract of ``pubmesh.proto.core`` (``Layer``, ``Outbox``), checked over every
module of ``proto/``: each class with a ``handle`` is a :class:`Layer` (``handle(event, now)``
with one input and the time, returning its outputs), and so is every stack's node; the checker
names a class that breaks the shape. The other half of the contract, that a part handed the
caller's output list takes it last, is ``tools/lint_sansio.py``'s (tests/repo/test_lint_sansio.py).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import gc
import importlib
import inspect
import random
import typing
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import pubmesh.proto
from pubmesh.proto.chord.node import ChordNode
from pubmesh.proto.core import (
    MESSAGE_INFO,
    MESSAGE_TYPES,
    Carrier,
    Layer,
    Message,
    NamesPublisher,
    NodeContext,
    Output,
    StackNode,
    register_message,
    topic_of,
)
from pubmesh.stacks.base import discovered_stacks, get_stack


def proto_classes() -> Iterator[type]:
    """Every class defined in a module of ``pubmesh.proto`` (imported here)."""
    root = Path(pubmesh.proto.__path__[0])
    # by file, not pkgutil: some stack folders are namespace packages (no __init__.py)
    for path in sorted(root.rglob("*.py")):
        name = ".".join(("pubmesh", "proto", *path.relative_to(root).with_suffix("").parts))
        module = importlib.import_module(name.removesuffix(".__init__"))
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def layer_problems(cls: type) -> list[str]:
    """What keeps ``cls`` from being a :class:`Layer`: its ``handle`` takes other than (event,
    now), positionally."""
    if not issubclass(cls, Layer):
        return [f"{cls.__name__} has no handle(event, now)"]
    params = list(inspect.signature(cls.handle).parameters.values())[1:]
    positional = [
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(positional) != 2 or positional[1] != "now":
        return [f"{cls.__name__}.handle takes ({', '.join(positional)}), not (event, now)"]
    returns = str(inspect.signature(cls.handle).return_annotation)
    if not returns.startswith(("list[", "Sequence[", "typing.Sequence[", "tuple[")):
        return [f"{cls.__name__}.handle returns {returns}, not its outputs"]
    return []


def test_every_class_with_a_handle_in_proto_is_a_layer() -> None:
    handlers = {cls for cls in proto_classes() if callable(getattr(cls, "handle", None))}
    names = {cls.__name__ for cls in handlers}
    # the layers the contract names, and every stack's node class: a walk that found none of
    # them would pass vacuously
    assert {
        "HyParView",
        "Plumtree",
        "PublicationLayer",
        "BrokerTreeNode",
        "ChordNode",
        "CliqueNode",
        "D2GNode",
        "GossipNode",
    } <= names, names
    problems = [problem for cls in sorted(handlers, key=str) for problem in layer_problems(cls)]
    assert problems == []


def test_every_stack_node_is_a_layer_of_inputs_and_outputs() -> None:
    stacks = discovered_stacks()
    assert len(stacks) >= 6, stacks
    for name in stacks:
        spec = get_stack(name)
        node = spec.create(NodeContext(0, random.Random(1), params=spec.params_type()))
        assert isinstance(node, StackNode) and isinstance(node, Layer), name
        assert layer_problems(type(node)) == [], name


def test_the_checker_names_a_layer_of_the_wrong_shape() -> None:
    class NoHandle:
        def receive(self, src: int, message: object, now: float) -> list[Output]:
            return []

    class OutputListFirst:
        def handle(self, out: list[Output], event: object, now: float) -> list[Output]:
            return out

    class NowFirst:
        def handle(self, now: float, event: object) -> list[Output]:
            return []

    class Good:
        def handle(self, event: object, now: float, *, trace: bool = False) -> list[Output]:
            return []

    class WritesOnly:
        def handle(self, event: object, now: float) -> None:
            pass

    assert layer_problems(NoHandle) == ["NoHandle has no handle(event, now)"]
    assert layer_problems(OutputListFirst) == [
        "OutputListFirst.handle takes (out, event, now), not (event, now)"
    ]
    assert layer_problems(NowFirst) == ["NowFirst.handle takes (now, event), not (event, now)"]
    assert layer_problems(Good) == []
    assert layer_problems(WritesOnly) == ["WritesOnly.handle returns None, not its outputs"]


#: the parts each stack's node composes, built on its shared state (``node.s``)
STATE_PARTS = {
    "brokertree": {"conn", "recovery", "flow", "acks", "client", "history"},
    "chord": {"ring", "joins", "filters", "publisher", "history"},
}


def _fields(obj: object) -> dict[str, object]:
    """An object's fields, from its ``__dict__`` and every class's ``__slots__``."""
    found = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if hasattr(obj, name):
                found[name] = getattr(obj, name)
    return found


def _imports_a_node_module(module: Path) -> list[str]:
    """The ``pubmesh.proto.<stack>.node`` modules the module at ``module`` imports (under
    TYPE_CHECKING too): a part imports no node."""
    tree = ast.parse(module.read_text())
    return [
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.module is not None
        and node.module.startswith("pubmesh.proto.")
        and node.module.endswith(".node")
    ]


def test_a_nodes_parts_are_built_on_its_shared_state_alone() -> None:
    """brokertree's and chord's parts are each handed the node's shared state and nothing
    else: they hold no reference to the node or to another part (what one part's work means
    for another goes through the node's router, ``proto/core.py`` ``Routed``), and their
    modules import no node. So a node makes no reference cycle (the simulator's loop runs
    without the collector), and a deep copy of a node (the generated contract test takes one
    before every input) has parts on the copy's state."""
    for name, expected in STATE_PARTS.items():
        spec = get_stack(name)
        node = spec.create(NodeContext(0, random.Random(1), params=spec.params_type()))
        state = node.s  # type: ignore[attr-defined]
        parts = {
            attr: value
            for attr, value in _fields(node).items()
            if value is not state and getattr(value, "s", None) is state
        }
        assert set(parts) == expected, (name, sorted(parts))
        for attr, part in parts.items():
            module = Path(inspect.getfile(type(part)))
            assert _imports_a_node_module(module) == [], (name, attr)
            for field_name, value in _fields(part).items():
                assert not isinstance(value, StackNode), (name, attr, field_name)
                assert all(value is not other for other in parts.values()), (name, attr, field_name)
        twin = copy.deepcopy(node)
        for attr in parts:
            assert getattr(twin, attr).s is twin.s, (name, attr)  # type: ignore[attr-defined]
        assert twin.s is not state  # type: ignore[attr-defined]
        gone = weakref.ref(node)
        gc.disable()
        try:
            del node, parts
            assert gone() is None, f"{name}: a node and its parts make a reference cycle"
        finally:
            gc.enable()


def node_taking_classes(classes: list[type]) -> list[str]:
    """Classes of ``classes`` (stack nodes aside) built with a stack node: a part given its
    node, which no stack has."""
    nodes = {cls.__name__ for cls in classes if issubclass(cls, StackNode)}
    found = []
    for cls in classes:
        init = cls.__dict__.get("__init__")
        if issubclass(cls, StackNode) or not inspect.isfunction(init):
            continue
        for parameter in list(inspect.signature(init).parameters.values())[1:]:
            if str(parameter.annotation).split(".")[-1] in nodes | {"StackNode"}:
                found.append(f"{cls.__module__}.{cls.__name__}({parameter.name})")
    return found


def test_no_class_under_proto_is_built_with_a_stack_node() -> None:
    """Over every class of ``proto/``: none but a stack node takes one when built (a tool over
    whole nodes, the corruption installer, takes a map of them, which is not a part)."""
    classes = list(proto_classes())
    assert node_taking_classes(classes) == []

    class Ring:  # what chord's ring was: a part on its node
        def __init__(self, node: ChordNode) -> None:
            self.node = node

    assert node_taking_classes([*classes, Ring]) == [f"{__name__}.Ring(node)"]


def test_the_checks_over_parts_see_a_part_that_holds_its_node_or_imports_it() -> None:
    """The two checks above, each on what they refuse: a part given its node, and a module
    that imports a node (the warm start, a helper over whole nodes, does)."""
    spec = get_stack("chord")
    node = spec.create(NodeContext(0, random.Random(1), params=spec.params_type()))
    assert not any(isinstance(v, StackNode) for v in _fields(node.joins).values())
    node.joins.owner = node  # type: ignore[attr-defined]
    assert any(isinstance(v, StackNode) for v in _fields(node.joins).values())
    root = Path(pubmesh.proto.__path__[0])
    assert _imports_a_node_module(root / "chord" / "warm.py") == ["pubmesh.proto.chord.node"]
    assert _imports_a_node_module(root / "chord" / "joins.py") == []


# ------------------------------------------------------------------ the publication contract
def test_every_payload_message_keeps_the_publication_contract() -> None:
    """Every payload message of every stack is read as a :class:`Carrier` (topic, id,
    payload) and, where its registration says it names one, a :class:`NamesPublisher`, with
    the values it was built with: what the runtime's admission, signing and ACL read instead
    of attributes by name."""
    list(proto_classes())  # every message module imported, so every class registered
    carriers = [cls for cls, info in MESSAGE_INFO.items() if info.payload]
    assert len(carriers) >= 13, [cls.__name__ for cls in carriers]
    for cls in carriers:
        # only the contract's fields are read: the others may stay None
        values: dict[str, object] = {f.name: None for f in dataclasses.fields(cls)}
        values.update(topic="t/1", pub_id=41, payload=b"xyz")
        info = MESSAGE_INFO[cls]
        if info.publisher:
            values["publisher"] = 7
        message = cls(**values)
        carried = typing.cast(Carrier, message)
        assert (carried.topic, carried.pub_id, carried.payload) == ("t/1", 41, b"xyz")
        assert topic_of(message) == "t/1"
        named = typing.cast(NamesPublisher, message).publisher if info.publisher else None
        assert named == (7 if "publisher" in values else None), cls.__name__
    named = [cls.__name__ for cls in carriers if MESSAGE_INFO[cls].publisher]
    assert named, "no payload message names its publisher: the check above proved nothing"


def test_registering_a_payload_message_checks_the_contract() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class NoTopic(Message):
        pub_id: int
        payload: bytes

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class TextPayload(Message):
        topic: str
        pub_id: int
        payload: str

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class NamedPublisher(Message):
        topic: str
        pub_id: int
        payload: bytes
        publisher: str

    with pytest.raises(TypeError, match="NoTopic: a payload message must have a 'topic' field"):
        register_message(NoTopic, 32001, layer="test", payload=True)
    with pytest.raises(TypeError, match="TextPayload: a payload message's 'payload' must be bytes"):
        register_message(TextPayload, 32002, layer="test", payload=True)
    with pytest.raises(TypeError, match="NamedPublisher: a payload message's 'publisher' must be"):
        register_message(NamedPublisher, 32003, layer="test", payload=True)
    for cls in (NoTopic, TextPayload, NamedPublisher):  # refused: nothing registered
        assert cls not in MESSAGE_INFO
    assert not {32001, 32002, 32003} & set(MESSAGE_TYPES)
    # a message that names a topic without carrying a publication: topic_of reads it all the same
    cls = next(cls for cls, info in MESSAGE_INFO.items() if info.topic and not info.payload)
    other = cls(**{f.name: "t/2" if f.name == "topic" else None for f in dataclasses.fields(cls)})
    assert topic_of(other) == "t/2"


def test_the_relay_stacks_parts_hold_no_node() -> None:
    """clique's and d2g's parts reach their node only as the ``ops`` each call is handed (the
    relay model's operations, ``RelayOps``): they keep no state, so no reference to a node and
    no field of one, and every method they offer takes ``ops`` first."""
    from pubmesh.proto.clique.build import BuildClique
    from pubmesh.proto.clique.leave import LeaveProtocol
    from pubmesh.proto.d2g.build import BuildD2G

    checked = 0
    for cls in (BuildClique, LeaveProtocol, BuildD2G):
        assert _imports_a_node_module(Path(inspect.getfile(cls))) == [], cls.__name__
        assert cls.__slots__ == () and not hasattr(cls(), "__dict__"), cls.__name__
        for name, method in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_"):
                continue
            parameters = list(inspect.signature(method).parameters)
            assert parameters[:2] == ["self", "ops"], (cls.__name__, name, parameters)
            checked += 1
    assert checked >= 15, checked
