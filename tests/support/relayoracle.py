"""The relay-graph oracle of docs/protocols/relay.md §2.4, over a :class:`PoolCluster`.

It rebuilds, per topic, the relay graph G = (R ∪ P, E_L ∪ E_M) from every node's relay table
(E_L: a process holds its relays, an OUT relay points at its next, an IN relay at its owner)
and from the references in the messages in flight (E_M: the process the frame will reach, found
by following its relay chain, will hold a relay to the referenced one), and checks the two
facts the protocols rest on: the graph of each topic's members is weakly connected, and no
relay's holder count is below the truth. Oracle only: an engine answering ``incoming`` would
break sans-IO and TCP parity (spec §2.4).

Counts are checked per holder as the owner can know them: a reference in flight is owed to the
process its owner counted it towards (``Ref.holder``), and a relay materialized elsewhere stays
owed to that process until its :class:`Adopt` arrives (an Adopt in flight moves it). The sum
over holders is the figure that guards collection; the per-holder split is what Release,
Adopt and Probe act on, so it is checked too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from pubmesh.harness import PoolCluster
from pubmesh.proto.clique.node import CliqueNode
from pubmesh.proto.core import Message, NodeId, StackNode
from pubmesh.proto.relay.layer import IN, PORT, ROUTED, Relay, refs_of
from pubmesh.proto.relay.messages import Adopt
from pubmesh.sim.engine import MSG, Simulation

Flight = tuple[NodeId, NodeId, Message]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[object, object] = {}

    def find(self, x: object) -> object:
        parent = self.parent
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: object, b: object) -> None:
        self.parent[self.find(a)] = self.find(b)


def _receiver(clique: Mapping[NodeId, CliqueNode], dst: NodeId, rid: object) -> NodeId | None:
    """The process a frame sent to relay ``rid`` at ``dst`` will be delivered at (None: the
    chain is broken, its references will make no relay)."""
    seen = set()
    while (dst, rid) not in seen:
        seen.add((dst, rid))
        node = clique.get(dst)
        relay: Relay | None = node.layer.relays.get(rid) if node is not None else None  # type: ignore[arg-type]
        if relay is None:
            return None
        if relay.kind == IN:
            return None if relay.zombie else dst
        assert relay.next is not None
        dst, rid = relay.next
    return None


def check(cluster: PoolCluster) -> list[str]:
    """The oracle over a :class:`PoolCluster` (its live nodes and its pool)."""
    nodes = {v: n for v, n in cluster.nodes.items() if v in cluster.live}
    flight = [(m.src, m.dst, m.message) for m in cluster.messages_in_flight()]
    return check_state(nodes, flight)


def check_sim(sim: Simulation) -> list[str]:
    """The oracle over a :class:`Simulation` (its live nodes and the messages in its queue)."""
    flight: list[Flight] = [(e[4], e[3], e[5]) for e in sim.pending_events() if e[2] == MSG]
    return check_state(sim.nodes, flight)


def check_state(nodes: Mapping[NodeId, StackNode], flight: Iterable[Flight]) -> list[str]:
    """The oracle's complaints (empty: both facts hold)."""
    clique = {v: n for v, n in nodes.items() if isinstance(n, CliqueNode)}
    flight = list(flight)
    problems: list[str] = []
    # holder counts against E_L and E_M
    moving: dict[tuple[NodeId, int], NodeId] = {}
    for src, _, message in flight:
        if isinstance(message, Adopt) and message.prev:
            moving[(src, message.prev)] = message.was
    truth: dict[tuple[NodeId, int], dict[NodeId, int]] = defaultdict(lambda: defaultdict(int))
    for v, node in clique.items():
        for relay in node.layer.relays.values():
            if relay.next is not None:
                truth[relay.next][moving.get((v, relay.rid), v)] += 1
    for _, _, message in flight:
        if type(message) in ROUTED:
            for _, ref in refs_of(message):
                truth[(ref.owner, ref.rid)][ref.holder] += 1
    for v, node in clique.items():
        for relay in node.layer.relays.values():
            if relay.rid == PORT:
                continue
            owed = truth.get((v, relay.rid), {})
            for holder, k in owed.items():
                if relay.holders.get(holder, 0) < k:
                    problems.append(f"relay {v}/{relay.rid}: holders[{holder}] below {k}")
            if sum(relay.holders.values()) < sum(owed.values()):
                problems.append(f"relay {v}/{relay.rid}: {sum(owed.values())} point at it")
    # weak connectivity per topic, over the topic's relays (not the bootstrap ones)
    topics = {t for n in clique.values() for t in n.instances}
    for topic in sorted(topics):
        members = [v for v, n in clique.items() if topic in n.instances]
        sets = _UnionFind()
        union, find = sets.union, sets.find

        for v, node in clique.items():
            for relay in node.layer.relays.values():
                if relay.rid == PORT or (relay.key != topic and not relay.zombie):
                    continue
                union(("p", v), ("r", v, relay.rid))
                if relay.kind == IN:
                    continue
                if relay.next is not None and relay.next[1] != PORT:
                    union(("r", v, relay.rid), ("r", *relay.next))
        for _, dst, message in flight:
            if type(message) in ROUTED and getattr(message, "topic", None) == topic:
                rid: Any = message.rid  # type: ignore[attr-defined]
                receiver = _receiver(clique, dst, rid)
                if receiver is None:
                    continue
                for _, ref in refs_of(message):
                    union(("p", receiver), ("r", ref.owner, ref.rid))
        roots = {find(("p", v)) for v in members}
        if len(roots) > 1:
            problems.append(f"topic {topic}: the relay graph of {len(members)} members is cut")
    return problems
