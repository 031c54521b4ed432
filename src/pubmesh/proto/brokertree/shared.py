"""What a brokertree node's parts share, and how one part acts on another (Kazemzadeh &
Jacobsen, *Highly Available Distributed Publish/Subscribe Systems*; docs/protocols/brokertree.md).

How it works
============
A node is one :class:`TreeState` and six parts (:mod:`.connections`, :mod:`.recovery`,
:mod:`.flow`, :mod:`.purge`, :mod:`.client`, :mod:`.history`). Each part is built with the
state and nothing else: it reads and writes the state's fields, keeps its own fields to
itself, and never sees its node or another part. What one part's work means for another
is either

* a **read of the state** (the active connection on a path, :meth:`TreeState.candidate`, was
  the connections part's; the flow part reads it here), or
* a **typed effect** (:class:`Effect`: :class:`Enqueue`, :class:`Retain`,
  :class:`DeliverOwn`, :class:`Unsubscribed`, :class:`SubConfirmed`,
  :class:`ClientRestarted`) that the part hands to its output list
  (``out.route(effect)``, :class:`pubmesh.proto.core.Routed`); the node's router hands it at
  once to the part that takes it (``BrokerTreeNode._route``), so its outputs land where the
  call stood and the traces are those of parts that called each other, byte for byte, or
* a value the part returns to the node, where the node orders the work itself: an LSeq's
  outcome (the depth-ack state a newly active link gets) and the publications held during
  recovery, both of which send on sessions, which number their frames as they send.

The rule that keeps it correct
==============================
**A part writes only its own fields and the state's.** ``tools/lint_sansio.py`` refuses a
write through another part (the node's too: it calls a part's methods), and no part holds a
reference to its node or a sibling, so there is no other way to reach one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias

from pubmesh.proto.brokertree.checkout import CheckoutQueue, Kind
from pubmesh.proto.brokertree.messages import LSeq, OriginT, ParInfoT, Pub, SeqT, Sub, Unsub
from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.brokertree.seqvect import HighSeq
from pubmesh.proto.brokertree.session import Sessions
from pubmesh.proto.brokertree.state import ACTIVE, IDLE, LARGE, PENDING, Life, Link
from pubmesh.proto.brokertree.table import SubscriptionTable, SubTuple
from pubmesh.proto.brokertree.topology import BROKER
from pubmesh.proto.brokertree.view import View
from pubmesh.proto.content import Conjunction
from pubmesh.proto.core import Effect, Message, NodeId, Routed

__all__ = [
    "ClientRestarted",
    "DeliverOwn",
    "Effect",
    "Enqueue",
    "OwnSub",
    "Retain",
    "SubConfirmed",
    "TreeOut",
    "TreeState",
    "Unsubscribed",
]


@dataclass(slots=True)
class OwnSub:
    """A subscription this client issued: its origin, topic, filter and predicate."""

    origin: OriginT
    topic: str
    filter: dict[str, Any]
    pred: Conjunction
    confirmed: bool = False
    parinfo: frozenset[ParInfoT] = frozenset()


@dataclass(slots=True, eq=False)
class TreeState:
    """The state a node's parts share (module essay): the tree as this node sees it, its
    sessions and links, the check-out queue, the table, and a client's subscriptions and
    delivery marks. Built empty; ``BrokerTreeNode._start`` fills the view and sessions."""

    node_id: NodeId
    params: BrokerTreeParams
    kind: str
    phase: Life = IDLE
    view: View | None = None
    sessions: Sessions | None = None
    #: the digest of the broker list and tree parameters (topology.wiring), set at Start
    wiring: int = 0
    epoch: float = 0.0
    started: float = 0.0
    #: the node's own sequence counter (lseq) and its incarnation number (timers carry it)
    k: int = 0
    life: int = 0
    #: nodes suspected or failed: beingReplaced (spec §4)
    down: set[NodeId] = field(default_factory=set)
    links: dict[NodeId, Link] = field(default_factory=dict)
    queue: CheckoutQueue = field(default_factory=CheckoutQueue)
    high: HighSeq = field(init=False)
    table: SubscriptionTable = field(default_factory=SubscriptionTable)
    #: unsubscribed origins and when their tombstones expire (spec §9)
    tombstones: dict[OriginT, float] = field(default_factory=dict)
    #: highest seq of each node found in our tuples' vects (lseq_sub, spec §7.1)
    sub_high: dict[NodeId, SeqT] = field(default_factory=dict)
    #: a broker's subscriber clients, and those not yet announced to its client peers
    subscribers: set[NodeId] = field(default_factory=set)
    announce: set[NodeId] = field(default_factory=set)
    #: partition table (Kazemzadeh & Jacobsen §3.5): π key (lead, seq) -> π, and when each
    #: π̄ goes
    pt: dict[tuple[NodeId, SeqT], ParInfoT] = field(default_factory=dict)
    pt_until: dict[tuple[NodeId, SeqT], float] = field(default_factory=dict)
    #: None until the node knows whether it lost a table (a peer knew an older incarnation
    #: of it: True, recovering), False once its table is whole (it never had one to lose, or
    #: a complete peer sent it a whole one); the LSeq it sends says which
    recovering: bool | None = None
    #: whether each peer's current incarnation is a restart of one we knew (spec §7.5)
    knew: dict[NodeId, bool] = field(default_factory=dict)
    #: the active connection (or why none) on the path to each node, until a change
    routes: dict[NodeId, tuple[NodeId | None, str]] = field(default_factory=dict)
    #: links need (de)activating; every queue entry's confirmation needs checking
    topology_changed: bool = True
    recheck_all: bool = False
    #: a client's own subscriptions by topic, the highest pseq delivered per publisher
    #: (spec §6.5's safety net) and how many it delivered: the live path and the topic
    #: history both deliver
    own: dict[str, OwnSub] = field(default_factory=dict)
    last: dict[NodeId, SeqT] = field(default_factory=dict)
    delivered: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.high = HighSeq(self.params.delta)

    @property
    def delta(self) -> int:
        return self.params.delta

    @property
    def is_broker(self) -> bool:
        return self.kind == BROKER

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def next_seq(self) -> SeqT:
        self.k += 1
        return (self.epoch, self.k)

    # ------------------------------------------------------------------- sending
    def send(self, peer: NodeId, message: Message, now: float, out: TreeOut) -> bool:
        """Send ``message`` on the open session with ``peer`` (its sid and n filled in)."""
        sessions = self.sessions
        assert sessions is not None
        if not sessions.is_open(peer):
            return False
        out.append(sessions.send(peer, _renumbering(message), now))
        return True

    def lseq_message(self, peer: NodeId, *, request: bool, gen: int) -> LSeq:
        """The handshake's LSeq to ``peer`` [P §4.2.1]: what we hold of it, whether we knew
        an older incarnation of it, whether our table is whole."""
        return LSeq(
            sid=0,
            n=0,
            request=request,
            gen=gen,
            lseq_sub=self.sub_high.get(peer),
            lseq_msg=self.high.get(peer),
            knew=self.knew.get(peer, False),
            recovering=self.recovering is not False,
        )

    # ------------------------------------------------------------------- routes, §4
    def candidate(self, target: NodeId) -> tuple[NodeId | None, str]:
        """The active connection on the path to ``target`` (Kazemzadeh & Jacobsen §3.2): the
        first node of the path's first δ + 1 that is up and has an open session, all before
        it failed. (None, PENDING) if the first live node has no open session yet; (None,
        LARGE) if the δ + 1 first nodes, or all nodes, of the path failed: a large fragment."""
        cached = self.routes.get(target)
        if cached is not None:
            return cached
        view, sessions = self.view, self.sessions
        assert view is not None and sessions is not None
        result: tuple[NodeId | None, str] = (None, LARGE)
        for hop in view.path(target)[: view.reach]:
            if hop in self.down:
                continue
            result = (hop, ACTIVE) if sessions.is_open(hop) else (None, PENDING)
            break
        self.routes[target] = result
        return result

    def changed(self) -> None:
        """A session came up or went down: routes are recomputed, links re-checked, and every
        entry's confirmation with them."""
        self.routes.clear()
        self.topology_changed = True
        self.recheck_all = True

    # ------------------------------------------------------------------ the table, §5
    def add_tuple(self, entry: SubTuple) -> bool:
        """STEP-II [P §3.5]: the tuple enters the table once (keyed by origin)."""
        if entry.origin in self.tombstones or not self.table.add(entry):
            return False
        view = self.view
        assert view is not None
        subscriber = entry.origin[0]
        view.learn_client(subscriber)
        if not view.is_broker(subscriber) and subscriber not in self.subscribers:
            self.subscribers.add(subscriber)
            self.announce.add(subscriber)
        for node, seq in entry.vect:
            if seq is not None and (self.sub_high.get(node) is None or seq > self.sub_high[node]):
                self.sub_high[node] = seq
        return True

    def tombstone(self, target: OriginT, now: float) -> None:
        self.tombstones[target] = now + self.params.tombstone_ttl
        self.table.remove(target)


def _renumbering(message: Message) -> Callable[[int, int], Message]:
    """``message`` with the session's sid and frame number, made when the session sends it."""

    def renumbered(sid: int, n: int) -> Message:
        changed: Message = replace(message, sid=sid, n=n)  # type: ignore[call-arg]
        return changed

    return renumbered


# ------------------------------------------------------------------------------- effects
@dataclass(frozen=True, slots=True)
class Enqueue(Effect):
    """A client's own message enters the check-out queue (to the flow part), numbered with
    the origin it was made with."""

    kind: Kind
    origin: OriginT
    message: Pub | Sub | Unsub
    rcpt: frozenset[NodeId]


@dataclass(frozen=True, slots=True)
class Retain(Effect):
    """A client's own publication is kept for the topic history (to the history part)."""

    topic: str
    pub_id: int
    payload: bytes
    attributes: dict[str, Any]
    seq: SeqT


@dataclass(frozen=True, slots=True)
class DeliverOwn(Effect):
    """A client's own publication is offered for delivery to itself (to the node, which asks
    the history part whether it is held or was replayed already)."""

    origin: OriginT
    message: Pub
    attributes: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Unsubscribed(Effect):
    """A client's subscription ended (to the history part: its window ends, the live copies it
    held are delivered)."""

    topic: str


@dataclass(frozen=True, slots=True)
class SubConfirmed(Effect):
    """A client's own subscription is confirmed (to the history part: its query is
    scheduled)."""

    topic: str
    origin: OriginT


@dataclass(frozen=True, slots=True)
class ClientRestarted(Effect):
    """A client came back as a new incarnation (from the connections part, to the node: the
    old one's tuples go, spec §7.5)."""

    client: NodeId
    epoch: float


#: the output list a brokertree part is handed: the runtime's outputs, and the effects it routes
TreeOut: TypeAlias = Routed[Effect]
