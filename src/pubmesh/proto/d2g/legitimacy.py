"""The legitimate states of the d2g stack (docs/protocols/relay.md §5), as ``is_legitimate``, and
the graph figures the spec asks to report (far pairs, degrees).

Per topic T, M_T is the set of live nodes with a running, non-leaving instance of T (the
contact included) and n = |M_T|. The state is legitimate iff, for every T:

1. the digraph {v → r.sink : r ∈ N_v} on M_T is strongly connected, every edge truly direct
   (its next is the live ``in`` of that member's instance) and to a live member;
2. 1 ≤ |N_v| ≤ c_hi·√n for every member, and the mean |N| ≥ c_lo·√n (c_hi = 6, c_lo = 0.5);
3. at most ε = 5% of the ordered pairs are more than 2 hops apart;
4. no leaving or stopped instance of T holds relays, and every node that subscribes to T has
   an instance in M_T (the clique's items 4 and 5).

D ≠ ∅ is allowed; closure is statistical only (spec §5).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pubmesh.proto.core import NodeId, StackNode
from pubmesh.proto.d2g.node import D2GNode

C_HI, C_LO, EPSILON = 6.0, 0.5, 0.05


@dataclass(frozen=True)
class GroupShape:
    """One topic group's digraph as the predicate sees it."""

    n: int
    #: member -> its out-neighbours (truly direct relays of N to live members), with twins
    #: counted once
    out: dict[NodeId, frozenset[NodeId]]
    #: member -> |N| (twins and broken relays included)
    sizes: dict[NodeId, int]
    #: every relay of N truly direct to a live member
    direct: bool

    def far_fraction(self) -> float:
        """The share of ordered pairs (v, w), v ≠ w, more than 2 hops apart."""
        if self.n < 2:
            return 0.0
        far = 0
        for v, first in self.out.items():
            near = set(first)
            for w in first:
                near |= self.out.get(w, frozenset())
            near.discard(v)
            far += self.n - 1 - len(near)
        return far / (self.n * (self.n - 1))

    def strongly_connected(self) -> bool:
        if not self.out:
            return True
        start = min(self.out)
        forward = _reach(start, self.out)
        backward_edges: dict[NodeId, set[NodeId]] = {v: set() for v in self.out}
        for v, targets in self.out.items():
            for w in targets:
                backward_edges.setdefault(w, set()).add(v)
        backward = _reach(start, {v: frozenset(s) for v, s in backward_edges.items()})
        return len(forward) == len(backward) == len(self.out)


def _reach(start: NodeId, out: Mapping[NodeId, frozenset[NodeId]]) -> set[NodeId]:
    seen = {start}
    stack = [start]
    while stack:
        for w in out.get(stack.pop(), frozenset()):
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def shapes(nodes: Mapping[NodeId, StackNode]) -> dict[str, GroupShape] | None:
    """Each topic's :class:`GroupShape`; None when an item other than 1–3 fails (a leaving
    or stopped instance, or a subscription without an instance)."""
    d2g = {v: node for v, node in nodes.items() if isinstance(node, D2GNode)}
    topics = sorted({t for node in d2g.values() for t in node.instances})
    out: dict[str, GroupShape] = {}
    for topic in topics:
        members = {}
        for v, node in d2g.items():
            instance = node.instances.get(topic)
            if instance is None:
                continue
            if instance.leaving or instance.stopped:
                return None  # item 4
            members[v] = instance
        for v, node in d2g.items():
            if topic in node.subscriptions() and v not in members:
                return None  # item 4 (the clique's item 5)
        edges: dict[NodeId, frozenset[NodeId]] = {}
        sizes: dict[NodeId, int] = {}
        direct = True
        for v, instance in members.items():
            targets = set()
            for relay in instance.n.values():
                target = members.get(relay.sink)
                if target is None or relay.next != (relay.sink, target.in_.rid):
                    direct = False
                    continue
                targets.add(relay.sink)
            edges[v] = frozenset(targets)
            sizes[v] = len(instance.n)
        out[topic] = GroupShape(len(members), edges, sizes, direct)
    return out


def is_legitimate(nodes: Mapping[NodeId, StackNode]) -> bool:
    groups = shapes(nodes)
    if groups is None:
        return False
    for shape in groups.values():
        if shape.n < 2:
            continue
        root = math.sqrt(shape.n)
        if not shape.direct or not shape.strongly_connected():
            return False  # item 1
        sizes = shape.sizes.values()
        if min(sizes) < 1 or max(sizes) > C_HI * root:
            return False  # item 2
        if sum(sizes) / shape.n < C_LO * root:
            return False  # item 2
        if shape.far_fraction() > EPSILON:
            return False  # item 3
    return True
