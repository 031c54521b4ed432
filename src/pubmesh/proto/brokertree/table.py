"""The subscription routing table and recipient sets (Kazemzadeh & Jacobsen §2.2, §3.1, §3.5;
docs/protocols/brokertree.md §5, §6.1, §12.3).

A broker keeps one tuple ⟨pred, from, seqVect⟩ per subscription [P §2.2], keyed by the
subscription's origin ``(S, sseq)`` (spec §5: "the tuple is added once"). ``from`` points δ + 1
hops back towards the subscriber, or to the subscriber itself when it is that close, so it is
always in the topology map, and the path to it is the route a matching publication takes.

* **RCPT of a publication** [P §2.2]: the ``from`` of every tuple that matches p and lies
  downstream of N with respect to p, i.e. not in a branch p came from.
* **RCPT of a subscription** [P §3.5] (spec §5): the paths to downstream publishers in the map
  plus every downstream node at distance exactly δ + 1, i.e. every outward branch that holds
  a table. A branch may end before δ + 1 hops; its last table holders then stand for the nodes
  at δ + 1 (:meth:`TopologyMap.frontier`).

Predicates are :mod:`pubmesh.proto.content` conjunctions with the topic as a ``$topic``
constraint (spec §6.1); the table indexes tuples by topic (spec §12.3).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pubmesh.proto.brokertree.seqvect import Entry, Seq
from pubmesh.proto.brokertree.topology import TopologyMap
from pubmesh.proto.content.filters import Conjunction, matches_prepared, prepare
from pubmesh.proto.core import NodeId

#: a subscription's identity: its subscriber and the subscriber's sequence number for it
Origin = tuple[NodeId, Seq]


@dataclass(frozen=True, slots=True)
class SubTuple:
    """⟨pred, from, seqVect⟩ of Kazemzadeh & Jacobsen §2.2, with the subscription's origin and
    topic, and the local sequence number this node gave the subscription (spec §7.2
    bypassedSubSet)."""

    origin: Origin
    topic: str
    pred: Conjunction
    frm: NodeId
    vect: tuple[Entry, ...]
    lseq: Seq


class SubscriptionTable:
    """Tuples by origin, indexed by topic."""

    __slots__ = ("_by_origin", "_by_topic")

    def __init__(self) -> None:
        self._by_origin: dict[Origin, SubTuple] = {}
        self._by_topic: dict[str, dict[Origin, SubTuple]] = {}

    def __len__(self) -> int:
        return len(self._by_origin)

    def __contains__(self, origin: object) -> bool:
        return origin in self._by_origin

    def __iter__(self) -> Iterator[SubTuple]:
        return iter(sorted(self._by_origin.values(), key=lambda t: t.origin))

    def get(self, origin: Origin) -> SubTuple | None:
        return self._by_origin.get(origin)

    def add(self, entry: SubTuple) -> bool:
        """Add a tuple; False (and nothing changes) if its origin is already there (spec §5
        "Duplicates": the tuple is added once)."""
        if entry.origin in self._by_origin:
            return False
        self._by_origin[entry.origin] = entry
        self._by_topic.setdefault(entry.topic, {})[entry.origin] = entry
        return True

    def remove(self, origin: Origin) -> SubTuple | None:
        entry = self._by_origin.pop(origin, None)
        if entry is not None:
            topic = self._by_topic[entry.topic]
            del topic[origin]
            if not topic:
                del self._by_topic[entry.topic]
        return entry

    def remove_subscriber(self, subscriber: NodeId) -> list[SubTuple]:
        """Drop every tuple of ``subscriber`` (spec §7.5: a client restarted)."""
        gone = [t for t in self if t.origin[0] == subscriber]
        for entry in gone:
            self.remove(entry.origin)
        return gone

    def matching(self, topic: str, attributes: Mapping[str, Any]) -> list[SubTuple]:
        """Tuples whose predicate matches a publication (attributes with ``$topic``), each
        attribute read once for all of them."""
        tuples = self._by_topic.get(topic)
        if not tuples:
            return []
        prepared = prepare(attributes)
        return [t for t in tuples.values() if matches_prepared(t.pred, prepared)]

    def rcpt(
        self,
        topic: str,
        attributes: Mapping[str, Any],
        topology: TopologyMap,
        upstream: Collection[NodeId],
    ) -> set[NodeId]:
        """RCPT_N^p [P §2.2]: ``from`` of every matching tuple downstream of N, i.e. whose
        branch is not among ``upstream`` (the branches p arrived from; at the publisher's
        broker, the publisher's own). A tuple whose ``from`` is N itself (N's own client
        subscribed through N, within reach) stands for a local subscriber, never upstream."""
        out: set[NodeId] = set()
        for entry in self.matching(topic, attributes):
            frm = entry.frm
            if frm == topology.owner or frm not in topology:
                continue
            if topology.branch(frm) not in upstream:
                out.add(frm)
        return out


def frontier(
    topology: TopologyMap, holds_table: Collection[NodeId], upstream: Collection[NodeId]
) -> set[NodeId]:
    """RCPT of a subscription at ``topology.owner`` [P §3.5]: in every branch not in
    ``upstream``, the table holders with no table holder beyond them in the map (those at
    δ + 1 hops, and the last ones of branches that end sooner)."""
    beyond: set[NodeId] = set()  # nodes that have a table holder strictly beyond them
    for x in holds_table:
        if x == topology.owner or x not in topology:
            continue
        path = topology.path(x)
        beyond.update(path[:-1])
    out = set()
    for x in holds_table:
        if x == topology.owner or x not in topology or x in beyond:
            continue
        if topology.branch(x) not in upstream:
            out.add(x)
    return out
