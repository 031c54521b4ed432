"""Warm start of the gossip stack: per topic, a HyParView overlay built by construction.

``[init] overlay = "warm"`` (see :mod:`pubmesh.sim.scenario`) starts every node subscribed, in
an overlay the protocol itself would accept, instead of building it by joins (≈ 80 messages
per node, ~90% of a join-heavy run's events). For each topic swarm the members get:

* **active views** (HyParView §4.1): symmetric, at most ``active_size`` members, and connected.
  The graph is ⌊active_size / 2⌋ random Hamiltonian cycles (the first alone connects the
  swarm) plus a random matching of the nodes with a free slot left, each link skipped where it
  would duplicate one or overfill a view, so nearly every view is full, as pubmesh's refill rule
  (a Neighbor request to a passive node on every shuffle tick while there is room) leaves a
  joined overlay once it has settled;
* **passive views** (§4.1): ``passive_view`` distinct members, none in the active view and not
  the node itself, drawn uniformly, as shuffles (§4.4) keep them;
* **Plumtree** (papers/004 §2.1.2 / Plumtree §3): with ``tree = "plumtree"``, every active
  member an eager peer, as NeighborUp makes it, no lazy peers yet (the first broadcast's
  duplicates prune the graph to a tree, as after a join); with the rooted tree (the
  default, :mod:`pubmesh.proto.gossip.rooted`), the breadth-first tree its beacons converge
  to: the lowest member id is the root, each member's parent its neighbour nearest the root
  (the lowest id among equals), eager links the tree's, the rest lazy, round 1;
* the **contact's swarm directory** (pubmesh's swarm-discovery rule): its reservoirs of joined
  members and of nodes that asked hold uniform samples of the members, as algorithm R leaves
  them after every member joined and reported.

Every member is marked joined; the join-timeout timer its subscription set finds it joined and
does nothing. Node ids in the views are the objects of the members list, so a 10⁶-node overlay
shares one int object per node instead of one per view entry.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from pubmesh.proto.core import NodeId, StackNode
from pubmesh.proto.gossip.hyparview import NONE
from pubmesh.proto.gossip.node import GossipNode
from pubmesh.proto.gossip.params import GossipParams


def active_graph(size: int, degree: int, rng: random.Random) -> list[list[int]]:
    """A connected graph over ``0 .. size-1`` with every degree ≤ ``degree`` (≥ 2 when
    ``size`` > ``degree`` + 1): ⌊degree / 2⌋ random Hamiltonian cycles, then a random matching
    over the nodes with room left. Small swarms (``size`` ≤ ``degree`` + 1) are complete."""
    if size <= degree + 1:
        return [[j for j in range(size) if j != i] for i in range(size)]
    adjacent: list[list[int]] = [[] for _ in range(size)]

    def link(a: int, b: int) -> None:
        if a == b or len(adjacent[a]) >= degree or len(adjacent[b]) >= degree:
            return
        if b in adjacent[a]:
            return
        adjacent[a].append(b)
        adjacent[b].append(a)

    for _ in range(max(1, degree // 2)):
        order = list(range(size))
        rng.shuffle(order)
        for i in range(size):
            link(order[i], order[(i + 1) % size])
    spare = [i for i in range(size) if len(adjacent[i]) < degree]
    rng.shuffle(spare)
    for i in range(0, len(spare) - 1, 2):
        link(spare[i], spare[i + 1])
    return adjacent


def warm_start(nodes: Mapping[NodeId, StackNode], rng: random.Random, params: object) -> None:
    """StackSpec.warm_start of the gossip stack (see the module docstring)."""
    gossip = {n: node for n, node in nodes.items() if isinstance(node, GossipNode)}
    if not gossip:
        return
    p = params if isinstance(params, GossipParams) else GossipParams()
    topics = sorted({topic for node in gossip.values() for topic in node.swarms})
    for topic in topics:
        members = [n for n in sorted(gossip) if topic in gossip[n].swarms]
        size = len(members)
        adjacent = active_graph(size, p.active_size, rng)
        dist, parent = _bfs(adjacent)
        for index, member in enumerate(members):
            swarm = gossip[member].swarms[topic]
            hv, pt = swarm.membership, swarm.broadcast
            active = [members[j] for j in adjacent[index]]
            hv.active = active
            hv.passive = _passive(members, index, adjacent[index], p.passive_view, rng)
            hv.joined = True
            hv.pending_join = NONE
            hv.pending_neighbor = NONE
            hv.tried.clear()
            if pt.rt is None:
                pt.eager = sorted(active)
                pt.lazy = []
                continue
            up = members[parent[index]] if parent[index] >= 0 else NONE
            pt.rt.start_warm(
                members[0],
                dist[index],
                up,
                {
                    members[j]: (dist[j], members[parent[j]] if parent[j] >= 0 else NONE)
                    for j in adjacent[index]
                },
            )
            tree = pt.rt.tree_links()
            pt.eager = sorted(n for n in active if n in tree)
            pt.lazy = sorted(n for n in active if n not in tree)
        for node in gossip.values():
            if node.contact == node.node_id:
                _fill_directory(node, topic, members, rng)


def _bfs(adjacent: list[list[int]]) -> tuple[list[int], list[int]]:
    """Hops from index 0 (the lowest member id) and each index's parent, the neighbour one
    hop nearer with the lowest index (-1 at the root; the graph is connected)."""
    size = len(adjacent)
    dist = [-1] * size
    parent = [-1] * size
    dist[0] = 0
    frontier = [0]
    while frontier:
        following: list[int] = []
        for at in frontier:
            for nxt in adjacent[at]:
                if dist[nxt] < 0:
                    dist[nxt] = dist[at] + 1
                    parent[nxt] = at
                    following.append(nxt)
                elif dist[nxt] == dist[at] + 1 and at < parent[nxt]:
                    parent[nxt] = at
        frontier = following
    return dist, parent


def _passive(
    members: list[NodeId], index: int, active: list[int], capacity: int, rng: random.Random
) -> list[NodeId]:
    """``capacity`` distinct members drawn uniformly, not ``index`` and not in ``active``."""
    size = len(members)
    excluded = {index, *active}
    room = size - len(excluded)
    want = min(capacity, room)
    if want <= 0:
        return []
    if room <= 4 * want:
        pool = [j for j in range(size) if j not in excluded]
        return [members[j] for j in rng.sample(pool, want)]
    # rejection sampling with random() scaled to the range: the pool is at least four times
    # the draw, and random() is one C call where randrange is several Python ones (this is
    # most of a 10^6-node warm start); the bias of int(random() * size) is below 2^-30
    chosen: list[int] = []
    taken = set(excluded)
    draw = rng.random
    while len(chosen) < want:
        j = int(draw() * size)
        if j not in taken:
            taken.add(j)
            chosen.append(j)
    if members[0] == 0 and members[-1] == size - 1:
        return chosen  # members are 0 .. size-1 (sorted, distinct): index and id agree
    return [members[j] for j in chosen]


def _fill_directory(
    node: GossipNode, topic: str, members: list[NodeId], rng: random.Random
) -> None:
    """The contact's reservoirs for ``topic``: uniform samples of the members, as algorithm R
    leaves them once every member has asked and reported its join."""
    directory = node.directory
    size = min(directory.size, len(members))
    directory.members[topic] = rng.sample(members, size)
    directory.asked[topic] = rng.sample(members, size)
    directory.seen[topic] = len(members)
    directory.seen_asked[topic] = len(members)
