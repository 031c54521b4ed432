"""What a chord node's parts share, and how one part acts on another (Terpstra et al.,
*A Peer-to-Peer Approach to Content-Based Publish/Subscribe*; docs/protocols/chord.md).

How it works
============
A node is one :class:`ChordState` and five parts (:mod:`.ring`, :mod:`.joins`,
:mod:`.filters`, :mod:`.publish`, :mod:`.history`). Each part is built with the state and
nothing else: it keeps its own fields to itself and never sees its node or another part.
The state holds the node's life (phase, incarnation, epoch, contacts), its subscriptions and
counters, and the overlay the parts all read: the successor list, the fingers, the edges
with their ranges and send order, the maintenance subscriptions (the ring part writes
them), the ends each in-neighbour gives this node, and the edge filters f(u→v) with their
clipped variants (the filters part writes them; the publisher routes by them). What one
part's work means for another is either a read of the state (pred(u),
:meth:`ChordState.pred`, reads the in-neighbours the filters keep) or a typed
:class:`Effect` the part hands to its output list (``out.route(effect)``,
:class:`pubmesh.proto.core.Routed`), which the node's router hands at once to the part that
takes it, so its outputs land where the call stood: a filter update's sequence number, a
RespChange's, is taken in the order of the rules.

A rejoin forgets the overlay (:meth:`ChordState.reset_overlay`, spec §8.3) and builds new ring,
joins and filters parts on the same state.

The rule that keeps it correct
==============================
**A part writes only its own fields and the state's** (``tools/lint_sansio.py`` refuses a
write through another part, and no part holds a reference to its node or a sibling).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeAlias

from pubmesh.proto.chord.keys import M as KEY_BITS
from pubmesh.proto.chord.keys import dist, even_key, finger_offset, hashed_key
from pubmesh.proto.chord.life import IDLE, JOINED, Phase
from pubmesh.proto.chord.messages import ChordHistoryQuery
from pubmesh.proto.chord.params import ChordParams
from pubmesh.proto.content import Conjunction, Disjunction
from pubmesh.proto.core import Deliver, Effect, NodeId, Routed

__all__ = [
    "ChordOut",
    "ChordState",
    "DeliverHere",
    "EdgesChanged",
    "Effect",
    "Learned",
    "MaintenanceChanged",
    "NotificationHere",
    "Notify",
    "OwnRangeChanged",
    "PeerGone",
    "Retain",
    "RouteQuery",
    "TopologyChanged",
]


@lru_cache(maxsize=1 << 16)
def _key_of(node: int, even: int) -> int:
    return even_key(node, even) if even else hashed_key(node)


@dataclass(slots=True, eq=False)
class ChordState:
    """The state a chord node's parts share (module essay)."""

    node_id: NodeId
    params: ChordParams
    #: key(u), fixed for the node's life
    key: int = field(init=False)
    phase: Phase = IDLE
    #: the incarnation (timers carry it) and the epoch of our RespChange/FilterUpdate numbers
    life: int = 0
    epoch: int = 0
    contacts: tuple[NodeId, ...] = ()
    subs: dict[str, Conjunction] = field(default_factory=dict)
    #: the time of the input being handled
    now: float = 0.0
    delivered: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    # ------------------------------------------------ the overlay (forgotten on a rejoin)
    #: successor list, clockwise from u (Terpstra et al. §5.1)
    succ: list[NodeId] = field(default_factory=list)
    #: the owner's predecessor from a LocationReply, until a true one connects (spec §3)
    pred_hint: NodeId | None = None
    #: p_k(u) for k = 1…m (index k−1), None where undefined
    fingers: list[NodeId | None] = field(default_factory=lambda: [None] * KEY_BITS)
    #: p(u)∖u sorted by distance, and the end of r_u(v) for each
    edges: list[NodeId] = field(default_factory=list)
    ends: dict[NodeId, int] = field(default_factory=dict)
    #: edges in send order: decreasing range size, ties smaller distance (§4.3)
    order: list[NodeId] = field(default_factory=list)
    maintenance: tuple[Conjunction, ...] = ()
    #: s(u)∖u: the end of the range each in-neighbour holds u responsible for
    in_ends: dict[NodeId, int] = field(default_factory=dict)
    #: f(u→v) per edge, and the clipped filters f(u→v) for [key(v), e)
    edge_filters: dict[NodeId, Disjunction] = field(default_factory=dict)
    clipped: dict[NodeId, dict[int, Disjunction]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.key = self.key_of(self.node_id)

    def reset_overlay(self) -> None:
        """Forget the overlay (a rejoin after the list ran out, spec §8.3)."""
        self.succ, self.pred_hint, self.fingers = [], None, [None] * KEY_BITS
        self.edges, self.ends, self.order, self.maintenance = [], {}, [], ()
        self.in_ends, self.edge_filters, self.clipped = {}, {}, {}

    # -------------------------------------------------------------------------- keys
    def key_of(self, node: NodeId) -> int:
        """key(node) (spec §2), hashed or test-only even."""
        return _key_of(node, self.params.even_keys)

    def d(self, node: NodeId) -> int:
        """d(u, node): clockwise distance from this node's key."""
        return dist(self.key, self.key_of(node))

    def count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    # ----------------------------------------------------------------- the ring, read
    def succ_len(self) -> int:
        """L: the parameter, or auto = max(4, |p(u)| − 1) (spec §3)."""
        return self.params.succ_len or max(4, len(self.edges))

    def pred(self) -> NodeId | None:
        """pred(u): the in-neighbour closest counter-clockwise, else the hint (spec §3)."""
        in_ends = self.in_ends
        if in_ends:
            key_of = self.key_of
            return min(in_ends, key=lambda x: (dist(key_of(x), self.key), x))
        if self.pred_hint is None and 0 < len(self.succ) < self.succ_len():
            # a list shorter than L holds the whole ring (as in far_fingers), so its last
            # entry is the predecessor. Without this a node that has a successor but no
            # in-neighbour yet (the contact just after the first joiner adopted it) owned no
            # key: location notifications for a join found no owner, and the joiner waited a
            # join_retry for nothing (ours; Chord's ownership (pred, n], Stoica et al.,
            # SIGCOMM 2001, §4.2, needs a predecessor)
            return self.succ[-1]
        return self.pred_hint

    def alone(self) -> bool:
        return self.phase == JOINED and not self.succ

    def peers(self) -> set[NodeId]:
        peers = set(self.edges) | set(self.in_ends) | set(self.succ)
        peers.discard(self.node_id)
        return peers

    def clockwise(self, nodes: Iterable[NodeId]) -> list[NodeId]:
        """Distinct nodes other than u, by distance, cut to L."""
        me, d = self.node_id, self.d
        seen = sorted({x for x in nodes if x != me}, key=lambda x: (d(x), x))
        return seen[: self.succ_len()]

    def far_fingers(self) -> list[int]:
        """The k whose p_k lies beyond the successor list (only if the list is full: a short
        list holds the whole ring)."""
        if len(self.succ) < self.succ_len():
            return []
        span = self.d(self.succ[-1])
        return [k for k in range(1, KEY_BITS + 1) if finger_offset(k) > span]

    def drop_far_finger(self, k: int) -> bool:
        """Mark far finger k undefined; True if that changed it."""
        if self.fingers[k - 1] is None or k not in self.far_fingers():
            return False
        self.fingers[k - 1] = None
        return True

    def edge_filter(self, x: NodeId, e: int) -> Disjunction:
        """f(u→x) restricted to [key(x), e): the clipped filter for e, when e ends inside
        r_u(x) and x has sent it, else the whole f(u→x) (a superset)."""
        if e != self.ends[x]:
            clipped = self.clipped.get(x, {}).get(e)
            if clipped is not None:
                return clipped
        return self.edge_filters[x]


# ------------------------------------------------------------------------------- effects
@dataclass(frozen=True, slots=True)
class EdgesChanged(Effect):
    """The ring installed new edges and ranges (to the filters: carve the filters from the
    old ones, RespChange where a range changed; spec §7, Terpstra et al. §5.2)."""

    old_edges: list[NodeId]
    old_ends: dict[NodeId, int]


@dataclass(frozen=True, slots=True)
class MaintenanceChanged(Effect):
    """The maintenance subscriptions changed (to the filters: the loopback is recomputed)."""


@dataclass(frozen=True, slots=True)
class OwnRangeChanged(Effect):
    """pred(u) moved with an in-neighbour's RespChange (to the ring: the location range and
    so the maintenance subscriptions follow)."""


@dataclass(frozen=True, slots=True)
class TopologyChanged(Effect):
    """A lookup or a join set the list or a finger (to the ring: edges and maintenance)."""


@dataclass(frozen=True, slots=True)
class Learned(Effect):
    """A join notice named a newcomer inside a join interval (to the ring: adopt it where it
    is closer, Terpstra et al. §5.2)."""

    node: NodeId


@dataclass(frozen=True, slots=True)
class PeerGone(Effect):
    """A peer left (its Leaving, spec §9): to the node, as its PeerDown (spec §8)."""

    peer: NodeId


@dataclass(frozen=True, slots=True)
class Notify(Effect):
    """A maintenance notification to publish from here (to the publisher, spec §7)."""

    topic: str
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class NotificationHere(Effect):
    """A maintenance notification reached this joined node (to the joins: answer a location,
    adopt a newcomer; Terpstra et al. §5.1–5.2)."""

    topic: str
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Retain(Effect):
    """This node's own publication, for the topic history (to the history, spec §14)."""

    topic: str
    pub_id: int
    payload: bytes
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DeliverHere(Effect):
    """A publication this node's subscription matches (to the node, which asks the history
    whether it was replayed already, spec §14)."""

    deliver: Deliver


@dataclass(frozen=True, slots=True)
class RouteQuery(Effect):
    """A history query to forward over the range [key(u), end) (to the publisher, spec §14)."""

    query: ChordHistoryQuery
    end: int | None


#: the output list a chord part is handed: the runtime's outputs, and the effects it routes
ChordOut: TypeAlias = Routed[Effect]
