"""The protocol contract: one handler shape for every protocol in pubmesh.

How it works
============
Every protocol is a *sans-IO state machine*. It owns decisions and nothing else: no sockets,
no clocks, no asyncio, no global random. A runtime (the simulator in :mod:`pubmesh.sim` or the
TCP runtime in :mod:`pubmesh.net`) drives it through exactly one entry point::

    outputs = node.handle(event, now)

``event`` is one of a closed set of inputs (:data:`Input`): a message received from a peer, a
timer that fired, a peer-down notice from the runtime's failure detector, or a command from the
application (subscribe, unsubscribe, publish, leave). ``now`` is the current time in float
seconds, passed in. ``outputs`` is a list drawn from a closed set (:data:`Output`): messages to
send, publications to deliver to the application, timers to set, peers to disconnect from, and
free-form trace records.

The one rule that keeps this correct: **a handler never reaches outside itself.** Everything it
needs arrives in the event, in ``now`` or in its injected :class:`NodeContext` (its id and its
own ``random.Random``, seeded from the run seed and the node id); everything it does leaves in
the outputs. That is what lets the same object run unchanged under the simulator, where a
million nodes share one process and one heap, and under asyncio, where each node is a process.

Timers are typed values (iroh-gossip ``proto/state.rs``): a protocol asks for ``SetTimer(after,
timer)`` with an instance of one of its own :class:`Timer` subclasses, and the runtime hands
the same value back in ``TimerFired`` once ``after`` seconds have passed. There is no cancel:
a protocol that no longer wants a timer ignores it when it fires (the timer carries a
generation or an epoch, or the handler checks its state), which makes timers trivially correct
under crashes and restarts.

Messages are plain frozen, slotted, keyword-only dataclasses, registered with
:func:`register_message` under a stable type tag for the network codec, with their layer
(``"membership"``, ``"broadcast"``, ``"ring"``, ...) and whether they carry publication payload
(what the trace and the RMR metric count), kept in :data:`MESSAGE_INFO`. Registration also
records the message's *schema*, its field types in field order (:func:`message_schema`), which
the codec and the simulator's size estimate work from: by default the class's resolved
annotations, or the types given explicitly with ``fields=`` (a class compiled with mypyc does
not keep precise annotations at run time).

A *stack node* (:class:`StackNode`) composes a stack's protocol layers behind the pub/sub
interface; it is what the runtimes drive. It lives here, with the contract, because every
stack's folder under ``proto/`` builds one and nothing in ``proto/`` may import from above.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import random
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

if TYPE_CHECKING:
    from pubmesh.proto.history import Journal, Retained, Retention

NodeId: TypeAlias = int
"""Nodes are named by integers. The simulator uses 0..n-1; the TCP runtime packs an IPv4
address and port into one integer (see :mod:`pubmesh.net`), so an id is also an address."""

Topic: TypeAlias = str
PubId: TypeAlias = int
"""Publication ids are chosen by whoever issues the publish command (the simulator's workload
numbers them 0, 1, 2, ...; the TCP runtime draws 63 random bits) and are unique per run."""


# --------------------------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------------------------

M = TypeVar("M", bound="Message")

#: type tag -> message class, for the codec; filled by :func:`message`.
MESSAGE_TYPES: dict[int, type[Message]] = {}
#: message class -> type tag.
MESSAGE_TAGS: dict[type[Message], int] = {}

#: Bytes a frame spends on its header (length prefix, version, type tag, MAC) in the trace's
#: size estimate; the TCP runtime records real encoded sizes instead.
HEADER_BYTES = 8
ID_BYTES = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """Base class of every protocol message: a plain frozen, slotted, keyword-only dataclass.

    A subclass is declared as an ordinary ``@dataclass(frozen=True, slots=True, kw_only=True)``
    and registered with :func:`register_message`, which records its wire tag, its layer and
    whether it carries payload in :data:`MESSAGE_INFO`. Nothing is stored on the class itself:
    a class the simulator-speed work compiles with mypyc cannot take class attributes set after
    its definition (and class variables on a compiled dataclass turn into fields)."""

    def publication(self) -> PubId | None:
        """The publication this message carries or announces, if any (trace column pub_id)."""
        return None

    def wire_size(self) -> int:
        """Estimated encoded size in bytes (header plus fields), used by the traces. The
        simulator computes the same figure with a function compiled once per class
        (:mod:`pubmesh.sim.sizes`)."""
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))
        size = HEADER_BYTES
        for name in names:
            size += estimate_size(getattr(self, name))
        return size


#: A message's schema: ``(field name, type)`` for each of its dataclass fields, in field order.
Schema: TypeAlias = tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """What the runtimes and the trace know of a message class: its wire ``tag``, its ``name``
    (the trace's ``type`` column), its protocol ``layer``, whether it carries publication
    ``payload`` (what RMR counts) and its ``schema`` (see :func:`message_schema`; None while
    annotations that did not resolve at registration are still to be resolved)."""

    tag: int
    name: str
    layer: str
    payload: bool
    schema: Schema | None = None
    #: whether the class has a ``topic: str`` field (:func:`topic_of`)
    topic: bool = False
    #: a payload message's optional fields: ``publisher`` (the node that published it) and
    #: ``attributes`` (a content-based publication's); see :class:`Carrier`
    publisher: bool = False
    attributes: bool = False


class Carrier(typing.Protocol):
    """The publication contract: what every payload message (``register_message(...,
    payload=True)``) carries, checked at registration. The TCP runtime's admission, signing
    and ACL read a copy as this once its ``MessageInfo.payload`` says it is one (a
    ``typing.cast``), never by attribute name; a message
    that also names its ``publisher`` or has ``attributes`` says so in its
    :class:`MessageInfo`, and is read as :class:`NamesPublisher` or :class:`HasAttributes`."""

    @property
    def topic(self) -> Topic: ...

    @property
    def pub_id(self) -> PubId: ...

    @property
    def payload(self) -> bytes: ...


class _NamesTopic(typing.Protocol):
    @property
    def topic(self) -> Topic: ...


class NamesPublisher(typing.Protocol):
    """A payload message that names its publisher (``MessageInfo.publisher``)."""

    @property
    def publisher(self) -> NodeId: ...


class HasAttributes(typing.Protocol):
    """A payload message with a content-based publication's ``attributes``
    (``MessageInfo.attributes``)."""

    @property
    def attributes(self) -> Any: ...


#: the fields the publication contract requires of a payload message, and their types
CARRIED: tuple[tuple[str, type], ...] = (("topic", str), ("pub_id", int), ("payload", bytes))


#: message class -> its registration; filled by :func:`register_message`.
MESSAGE_INFO: dict[type[Message], MessageInfo] = {}

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def estimate_size(value: object) -> int:
    """Size of one field value: 8 per number, 2 + length per string or bytes, 1 per flag or
    None, 2 + the members per container, the fields of a nested message."""
    # exact-type checks first: this runs for every field of every message
    kind = type(value)
    if kind is int or kind is float:
        return ID_BYTES
    if kind is str or kind is bytes:
        return 2 + len(value)  # type: ignore[arg-type]
    if kind is bool or value is None:
        return 1
    if kind is tuple or kind is list or kind is frozenset or kind is set:
        # members sized in the loop where they are leaves: a brokertree seqVect is a tuple of
        # (node, (epoch, n)) pairs, and a call per number was a quarter of its simulations
        size = 2
        for member in value:  # type: ignore[attr-defined]
            inner = type(member)
            if inner is int or inner is float:
                size += ID_BYTES
            elif member is None or inner is bool:
                size += 1
            else:
                size += estimate_size(member)
        return size
    if isinstance(value, dict):
        return 2 + sum(estimate_size(k) + estimate_size(v) for k, v in value.items())
    if isinstance(value, Message):
        return value.wire_size()
    return ID_BYTES


def register_message(
    cls: type[M],
    tag: int,
    *,
    layer: str,
    payload: bool = False,
    fields: Mapping[str, Any] | None = None,
) -> type[M]:
    """Register a message class under ``tag`` for the codec, the trace and the metrics.

    Tags are part of the wire format: never reuse or renumber one. Ranges by stack:
    1-99 runtime/common and tests, 100-199 gossip, 200-299 skipring, 300-399 chord,
    400-499 brokertree, 500-599 clique/d2g (docs/adding-a-stack.md).

    ``fields`` (field name -> type, e.g. ``{"pub_id": int, "peers": tuple[int, ...]}``) gives
    the message's schema explicitly, for a class whose run-time annotations cannot be trusted
    (one compiled with mypyc); it must name exactly the dataclass's fields. Without it the
    schema is the class's annotations, resolved here, or on first use (:func:`message_schema`)
    if they do not resolve yet (a forward reference to a class defined further down).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} must be a frozen, slotted dataclass")
    if not 0 < tag < 0x8000:
        # the TCP runtime's frames use the top bit (signed publications) and 0 (control)
        raise ValueError(f"message tag {tag}: tags are 1..32767")
    if tag in MESSAGE_TYPES:
        raise ValueError(f"message tag {tag} already used by {MESSAGE_TYPES[tag].__name__}")
    if cls in MESSAGE_INFO:
        raise ValueError(f"{cls.__name__} is already registered")
    schema: Schema | None
    if fields is None:
        try:
            schema = _annotated_schema(cls)
        except Exception:  # resolved again, and the failure reported, on first use
            schema = None
    else:
        schema = _explicit_schema(cls, fields)
    names = {f.name for f in dataclasses.fields(cls)}
    if payload:
        _check_carrier(cls, names, schema)
    MESSAGE_TYPES[tag] = cls
    MESSAGE_TAGS[cls] = tag
    MESSAGE_INFO[cls] = MessageInfo(
        tag,
        cls.__name__,
        layer,
        payload,
        schema,
        topic="topic" in names and (schema is None or dict(schema)["topic"] is str),
        publisher=payload and "publisher" in names,
        attributes=payload and "attributes" in names,
    )
    return cls


def _check_carrier(cls: type, names: set[str], schema: Schema | None) -> None:
    """TypeError unless payload message class ``cls`` keeps the publication contract
    (:class:`Carrier`): ``topic: str``, ``pub_id: int``, ``payload: bytes`` and, where it names
    one, ``publisher: int``. Types are checked where the schema resolved at registration."""
    declared = dict(schema) if schema is not None else {}
    wanted = [*CARRIED, ("publisher", int)] if "publisher" in names else list(CARRIED)
    for name, kind in wanted:
        if name not in names:
            raise TypeError(f"{cls.__name__}: a payload message must have a {name!r} field")
        if name in declared and declared[name] is not kind:
            raise TypeError(
                f"{cls.__name__}: a payload message's {name!r} must be {kind.__name__}, "
                f"not {declared[name]!r}"
            )


def message_schema(cls: type[Message]) -> Schema:
    """The schema of message class ``cls``: ``(field name, type)`` per dataclass field, in
    field order, as registered (the ``fields=`` of :func:`register_message`, or the class's
    resolved annotations). Annotations that did not resolve at registration are resolved now
    and recorded; a class that is not registered gets its annotations, resolved on each call.
    Raises TypeError naming the class if they still do not resolve."""
    info = MESSAGE_INFO.get(cls)
    if info is not None and info.schema is not None:
        return info.schema
    try:
        schema = _annotated_schema(cls)
    except Exception as error:
        raise TypeError(f"cannot resolve the annotations of {cls.__name__}: {error}") from None
    if info is not None:
        MESSAGE_INFO[cls] = dataclasses.replace(info, schema=schema)
    return schema


def _annotated_schema(cls: type[Message]) -> Schema:
    """The schema from ``cls``'s annotations (each resolved in its defining module's globals)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _explicit_schema(cls: type[Message], declared: Mapping[str, Any]) -> Schema:
    """The schema from ``register_message(fields=declared)``, in the dataclass's field order;
    TypeError unless ``declared`` names exactly the dataclass's fields."""
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [name for name in names if name not in declared]
    extra = [name for name in declared if name not in names]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing {', '.join(map(str, missing))}")
        if extra:
            problems.append(f"not fields of the class: {', '.join(map(str, extra))}")
        raise TypeError(
            f"{cls.__name__}: fields= must name exactly its dataclass fields "
            f"({'; '.join(problems)})"
        )
    return tuple((name, declared[name]) for name in names)


def message_info(msg: Message) -> MessageInfo:
    """The registration of ``msg``'s class (KeyError for an unregistered class)."""
    return MESSAGE_INFO[type(msg)]


def topic_of(msg: Message) -> Topic | None:
    """The topic ``msg`` names (a registered class with a ``topic: str`` field), or None."""
    info = MESSAGE_INFO.get(type(msg))
    return typing.cast(_NamesTopic, msg).topic if info is not None and info.topic else None


# --------------------------------------------------------------------------------------------
# Timers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timer:
    """Base class of timer values. The runtime hands a timer back unchanged when it fires.

    Every layer declares its own timers as frozen, slotted subclasses that say what they are
    about (Plumtree's ``SendGraft(pub_id, generation)``, HyParView's ``ShuffleTick()``), and a
    node that runs several instances of a layer wraps them with the instance they belong to
    (the gossip node's ``SwarmTimer(topic, epoch, timer)``), so a timer is routed by its type
    and a stale one, from an instance since replaced, is recognised by its epoch and ignored
    (iroh-gossip ``proto/state.rs``: ``Timer`` per topic, ``plumtree::Timer`` per layer)."""


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Receive:
    """A message arrived from ``src``."""

    src: NodeId
    message: Message


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A timer set earlier with :class:`SetTimer` has expired."""

    timer: Timer


@dataclass(frozen=True, slots=True)
class PeerDown:
    """The runtime's failure detector: ``peer`` is unreachable (a send failed or the
    connection to it was lost). This is the perfect-ish failure detector the papers assume."""

    peer: NodeId


@dataclass(frozen=True, slots=True)
class Start:
    """The node boots. ``contacts`` are the cluster's well-known nodes (the contact node of
    Henriques & Pamplona §3.1, or the supervisor of Feldmann et al.), in order of preference.
    ``wall`` is the wall-clock time of the boot in seconds, from a runtime whose ``now`` restarts
    with the process (TCP), so that a stack numbering its incarnations (brokertree's epochs) can
    tell a restarted process from its predecessor; None in the simulator, whose ``now`` is the run's
    one clock."""

    contacts: tuple[NodeId, ...] = ()
    wall: float | None = None


@dataclass(frozen=True, slots=True)
class HistoryRequest:
    """What a subscriber asks of the topic's past when it subscribes (docs/history.md): the
    publications issued before it joined, at most ``count`` of them (0: no limit) and none
    older than ``seconds`` (0: no limit), as far as the stack retains them. Both 0 is "all".
    :func:`pubmesh.proto.history.parse_history` reads the text form (``all``, ``50``, ``90s``)."""

    count: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.count and self.seconds:
            return f"{self.count} within {self.seconds:g}s"
        if self.count:
            return str(self.count)
        return f"{self.seconds:g}s" if self.seconds else "all"


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Application command: subscribe to ``topic``; content-based stacks also take a filter
    (a mapping attribute -> constraint, see the chord and brokertree stacks). ``history``
    asks for the topic's retained past too (None: from now on only); a stack that keeps no
    history ignores it (:attr:`pubmesh.stacks.base.StackSpec.history` says which do)."""

    topic: Topic
    filter: Mapping[str, Any] | None = None
    history: HistoryRequest | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    topic: Topic


@dataclass(frozen=True, slots=True)
class Publish:
    """Application command: publish ``payload`` on ``topic`` under the caller-chosen id."""

    topic: Topic
    pub_id: PubId
    payload: bytes = b""
    attributes: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Leave:
    """Application command: leave the system gracefully (the stack's leave protocol, if any)."""


Command: TypeAlias = Start | Subscribe | Unsubscribe | Publish | Leave
Input: TypeAlias = Receive | TimerFired | PeerDown | Command


# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    dst: NodeId
    message: Message


@dataclass(frozen=True, slots=True)
class Deliver:
    """Hand a publication to the application. ``hops`` counts overlay hops from the publisher
    (0 when the publisher delivers its own publication). ``replayed``: a publication issued
    before this subscription, handed over from the topic's history (``Subscribe.history``);
    ``age``, for a replayed one: how long before this delivery it was published, as the
    history's holder knew it (the publisher itself on chord and brokertree; on gossip, clique
    and d2g the member that answered, from when it first had it), the answer's transit not
    counted. The runtimes turn it into the publication's original publish time."""

    topic: Topic
    pub_id: PubId
    payload: bytes
    hops: int
    attributes: Mapping[str, Any] | None = None
    replayed: bool = False
    age: float | None = None


@dataclass(frozen=True, slots=True)
class SetTimer:
    after: float
    timer: Timer


@dataclass(frozen=True, slots=True)
class Disconnect:
    """The protocol no longer needs a connection to ``peer`` (the TCP runtime may close it)."""

    peer: NodeId


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """A protocol event worth a row in the trace's ``events`` table (``detail`` is JSON-able)."""

    kind: str
    detail: Mapping[str, Any] = field(default_factory=dict)


Output: TypeAlias = Send | Deliver | SetTimer | Disconnect | TraceRecord


# --------------------------------------------------------------------------------------------
# Node context and snapshots
# --------------------------------------------------------------------------------------------


def node_seed(run_seed: int, node: NodeId) -> int:
    """Seed of a node's private ``random.Random``: a hash of (run seed, node id), so nodes'
    streams are independent and do not shift when other nodes are added."""
    digest = hashlib.sha256(f"pubmesh:{run_seed}:{node}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class NodeRandom(random.Random):
    """A node's private random stream: :class:`random.Random` (the same Mersenne Twister, the
    same numbers for the same seed) with its one Python-level attribute, ``gauss_next``, in a
    slot, so an instance carries no ``__dict__`` (336 bytes a node at 10^6 nodes)."""

    __slots__ = ("gauss_next",)


def node_random(run_seed: int, node: NodeId, incarnation: int = 0) -> NodeRandom:
    """The random stream of ``node`` (its ``incarnation``-th life) in the run ``run_seed``."""
    return NodeRandom(node_seed(run_seed, node) + incarnation)


@dataclass(slots=True)
class NodeContext:
    """What a protocol instance is given at creation: its id, its random stream, its role and
    the stack's parameters. Nothing else from the outside world."""

    node_id: NodeId
    rng: random.Random
    role: str = "peer"
    params: Any = None


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """One row of the trace's ``snapshots`` table, as reported by a protocol instance."""

    topic: Topic
    layer: str
    neighbors: tuple[NodeId, ...]
    state: Mapping[str, Any]


def sorted_ids(ids: Iterable[NodeId]) -> list[NodeId]:
    """Node ids in a fixed order: iterate through this wherever order changes the outcome."""
    return sorted(ids)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------

LayerIn = TypeVar("LayerIn", contravariant=True)
LayerOut = TypeVar("LayerOut", covariant=True)
Item = TypeVar("Item", contravariant=True)


@typing.runtime_checkable
class Layer(typing.Protocol[LayerIn, LayerOut]):
    """The contract of every protocol layer, and of every stack node: ``handle(event, now)``
    takes one input of the layer's closed input union and returns its outputs, drawn from its
    closed output union, in the order they happened (HyParView's ``MembershipInput`` in,
    ``MembershipOutput`` out; Plumtree's ``BroadcastInput``, ``BroadcastOutput``; a node's
    :data:`Input`, :data:`Output`). A layer may also offer ``receive(src, message, now)`` and
    ``fire(timer, now)``, the same as ``handle`` of a ``Receive`` or a ``TimerFired`` without
    the wrapper; the generated contract test (``tests/proto/test_stacks_generated.py``)
    requires the same outputs both ways, and ``tests/proto/test_layer_contract.py`` that every
    layer of ``proto/`` satisfies this protocol.

    Below a layer, its parts (a ring's topic state, a node's recovery or flow) are handed the
    caller's output list instead of returning one: an :class:`Outbox`, always the last
    positional parameter (``f(inputs..., now, out)``; keyword-only options may follow),
    which ``tools/lint_sansio.py`` enforces."""

    def handle(self, event: LayerIn, now: float, /) -> typing.Sequence[LayerOut]: ...


class Outbox(typing.Protocol[Item]):
    """Where a part writes its outputs: the caller's list, typed by what the part may append
    (a rooted tree appends ``Send`` and ``SetTimer`` to Plumtree's list of
    ``BroadcastOutput``). Always the last positional parameter (:class:`Layer`)."""

    def append(self, item: Item, /) -> None: ...

    def extend(self, items: Iterable[Item], /) -> None: ...


class Effect:
    """What one part's work means for another part of the same node (brokertree's
    ``Enqueue``, chord's ``EdgesChanged``): routed by the node to the part that takes it
    (:class:`Routed`), never an output; the runtime sees only what that part does."""

    __slots__ = ()


E = TypeVar("E", bound=Effect)


class Routed(list["Output"], typing.Generic[E]):
    """The output list a stack node hands its parts for one input: the runtime's outputs,
    and a way to say what one part's work means for another. A part calls
    ``out.route(effect)`` with a typed effect (brokertree's ``Enqueue``, chord's
    ``EdgesChanged``); the node's router, given when the list was made, hands it at once to
    the part that takes it. At once, so the effect's outputs land where the call stood and
    the work happens in the order of the protocol's rules, as when parts called each other:
    a session numbers its frames as it sends them, a filter its updates.

    A part so sees neither its node nor another part, only its shared state and this list;
    the list lives for one input, so the router's reference to the node makes no lasting
    reference cycle (the simulator's loop runs without the collector)."""

    __slots__ = ("_router",)

    def __init__(self, router: typing.Callable[[E, Routed[E]], None]) -> None:
        super().__init__()
        self._router = router

    def route(self, effect: E) -> None:
        """Hand ``effect`` to the part that takes it, now."""
        self._router(effect, self)


# --------------------------------------------------------------------------------------------
# Stack nodes
# --------------------------------------------------------------------------------------------


class StackNode(abc.ABC):
    """A node of some stack: the protocol layers of ``proto/<stack>/`` composed behind the
    pub/sub interface. Subclasses implement :meth:`handle` and :meth:`monitored_peers`."""

    # slots here let a stack's node class declare its own and carry no per-node __dict__ (the
    # gossip node does: it matters at 10^6 nodes); a subclass without __slots__ gets one
    __slots__ = ("ctx", "node_id", "retained_journal", "rng")

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.node_id: NodeId = ctx.node_id
        self.rng: random.Random = ctx.rng
        #: with a data directory: where the node's retentions journal what they keep
        #: (:meth:`keep_retained`); None otherwise
        self.retained_journal: Journal | None = None

    @abc.abstractmethod
    def handle(self, event: Input, now: float) -> list[Output]:
        """The one entry point: an input in, outputs out."""

    def receive(self, src: NodeId, message: Message, now: float) -> list[Output]:
        """``handle(Receive(src, message), now)``, without building the wrapper. The simulator
        calls this for every message; a stack may override it with a direct route to the same
        code (it must behave exactly as :meth:`handle` does)."""
        return self.handle(Receive(src, message), now)

    def fire(self, timer: Timer, now: float) -> list[Output]:
        """``handle(TimerFired(timer), now)``, without building the wrapper (see
        :meth:`receive`)."""
        return self.handle(TimerFired(timer), now)

    @abc.abstractmethod
    def monitored_peers(self) -> Iterable[NodeId]:
        """Peers whose failure this node wants to hear of: those it keeps connections to. The
        simulator's failure detector notifies a node when one of these crashes, as a lost TCP
        connection would."""

    def snapshot(self) -> Iterable[SnapshotRow]:
        """Rows for the trace's ``snapshots`` table: per topic and layer, neighbours and state."""
        return ()

    def subscriptions(self) -> Iterable[str]:
        """Topics this node currently delivers."""
        return ()

    def statistics(self) -> NodeStatistics:
        """Counters for humans (the node shell's ``stats``, the cluster's live table), in the
        same shape for every stack."""
        return NodeStatistics(role=self.ctx.role, topics=tuple(sorted(self.subscriptions())))

    def durable(self) -> dict[str, Any]:
        """What the node keeps across its lives besides the ids it delivered (those the runtime
        keeps itself, pubmesh.durable): JSON-able state that :meth:`restore` takes back in the
        node's next life, such as brokertree's per-publisher high-water marks. The network
        runtime writes it to the data directory at every group commit; the simulator keeps it
        at a crash for a ``durable`` recover. Empty: nothing (the default)."""
        return {}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`durable` gave in the node's last life; called before Start.
        ValueError, saying what is wrong, for state it cannot take (a damaged or planted
        file: the node then refuses to start rather than trust it). The default keeps
        nothing, so it takes nothing: any state given it is refused."""
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state across its lives")

    def retentions(self) -> Iterable[Retention]:
        """The topic history the node keeps in :class:`~pubmesh.proto.history.Retention`
        objects (chord's and brokertree's publishers, the clique and d2g contact): what a data
        directory keeps across its lives. None on the other stacks (the default): gossip's
        history is Plumtree's 30 s cache, skipring's its trie."""
        return ()

    def restore_retained(self, topic: str, item: Retained) -> None:
        """Take back one publication the node retained in its last life (before Start, oldest
        first; ``item.t`` on this life's clock). ValueError, saying what is wrong, for one it
        cannot take. The default keeps no retention, so it takes none."""
        raise ValueError(f"{type(self).__name__} keeps no topic history across its lives")

    def keep_retained(self, journal: Journal) -> None:
        """From now on every publication the node retains is also appended to ``journal``
        (the runtime writes it to the data directory at its next group commit)."""
        self.retained_journal = journal
        for retention in self.retentions():
            retention.journal = journal

    def held_bytes(self) -> int:
        """Bytes of payloads and per-message state the node holds (caches kept to answer
        repairs, announcements awaited), as the stack estimates them: the network runtime
        counts them in the node's memory budget. Called per publication: keep it cheap."""
        return 0


@dataclass(frozen=True, slots=True)
class NodeStatistics:
    """A stack node's counters, one shape for every stack (trio's ``RunStatistics``): what a
    human asks of a node, with the stack's own counters under names of its choosing."""

    #: the node's role ("peer", or an infrastructure role such as "supervisor")
    role: str = "peer"
    #: topics the node delivers
    topics: tuple[str, ...] = ()
    #: publications handed to the application
    delivered: int = 0
    #: overlay neighbours per topic (the links publications travel)
    neighbors: Mapping[str, tuple[NodeId, ...]] = field(default_factory=dict)
    #: protocol messages received, by type
    received_by_type: Mapping[str, int] = field(default_factory=dict)
    #: the stack's own counters (e.g. timeouts, configurations, repairs), by name
    counters: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able copy (the node's control protocol and the API print this)."""
        return {
            "role": self.role,
            "topics": list(self.topics),
            "delivered": self.delivered,
            "neighbors": {topic: list(ids) for topic, ids in sorted(self.neighbors.items())},
            "received_by_type": dict(sorted(self.received_by_type.items())),
            "counters": dict(sorted(self.counters.items())),
        }
