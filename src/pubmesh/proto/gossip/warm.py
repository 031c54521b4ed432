"""Warm start of the gossip stack: per topic, a HyParView overlay built by construction.

``[init] overlay = "warm"`` (see :mod:`pubmesh.scenario.model`) starts every node subscribed, in
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
* **Plumtree** (Henriques & Pamplona §2.1.2 / Plumtree §3): with ``tree = "plumtree"``, every active
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
from itertools import chain
from typing import TYPE_CHECKING

from pubmesh.proto.core import NodeId, StackNode
from pubmesh.proto.gossip.hyparview import NONE
from pubmesh.proto.gossip.node import GossipNode
from pubmesh.proto.gossip.params import GossipParams

if TYPE_CHECKING:
    import numpy as np


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
        levels: tuple[list[int], list[int]] | None = None  # the BFS tree, if a member needs it
        passive = passive_views(members, adjacent, p.passive_view, rng)
        for index, member in enumerate(members):
            swarm = gossip[member].swarms[topic]
            hv, pt = swarm.membership, swarm.broadcast
            active = [members[j] for j in adjacent[index]]
            hv.active = active
            hv.passive = passive[index]
            hv.joined = True
            # settled: past the first ``announce_every`` shuffle ticks, at which a new member
            # announces at each (the component watch of a new swarm); from here on it
            # announces at every ``announce_every``-th, as a member of a settled swarm does
            hv.ticks = p.announce_every
            hv.pending_join = NONE
            hv.pending_neighbor = NONE
            hv.tried.clear()
            if pt.rt is None:
                pt.eager = sorted(active)
                pt.lazy = []
                continue
            if levels is None:
                levels = _bfs(adjacent)
            dist, parent = levels
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


def passive_views(
    members: list[NodeId], adjacent: list[list[int]], capacity: int, rng: random.Random
) -> list[list[NodeId]]:
    """Every member's passive view, index by index: what :func:`_passive` draws for each in
    turn, the same members in the same order, and ``rng`` left in the same state.

    Where every member draws by rejection (its pool is over four times the view), the draws
    are made with NumPy instead, a block of members at a time: the legacy ``RandomState`` is
    the same Mersenne Twister with the same 53-bit doubles as :meth:`random.Random.random`, so
    given ``rng``'s state it yields ``rng``'s stream. A member whose ``capacity`` draws hold
    neither itself, nor an active neighbour, nor a repeat takes them as they are, as the
    rejection loop would; the first member of a block whose draws do not is drawn one value at
    a time from the same stream, by the loop's rule, and the block starts again after it. The
    views share the ``members`` objects (10^6 nodes: 3 × 10^7 entries, one int object per
    node)."""
    size = len(members)
    widest = max((len(a) for a in adjacent), default=0)
    if capacity <= 0 or size - 1 - widest <= 4 * capacity:
        return [_passive(members, i, adjacent[i], capacity, rng) for i in range(size)]
    # NumPy only here: every node process imports this module (the stack's warm start), and
    # NumPy's import is ~0.3 s of each one's start-up
    import numpy as np

    version, internal, gauss_next = rng.getstate()
    start = ("MT19937", np.array(internal[:-1], dtype=np.uint32), internal[-1], 0, 0.0)
    source = np.random.RandomState()
    source.set_state(start)
    width = capacity
    views = np.empty((size, width), dtype=np.int64)
    lengths = np.fromiter(map(len, adjacent), dtype=np.int64, count=size)
    # each row: the member's own index and its active neighbours, padded with distinct
    # negative numbers (no draw is negative), so a draw that repeats any value is one to reject
    near = np.empty((size, widest + 1), dtype=np.int64)
    near[:] = -np.arange(1, widest + 2)
    near[:, 0] = np.arange(size)
    rows = np.repeat(np.arange(size), lengths)
    columns = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    near[rows, columns + 1] = np.fromiter(chain.from_iterable(adjacent), np.int64, len(rows))
    stream = np.empty(0, dtype=np.int64)  # drawn, not yet used
    used = 0  # values of the stream used so far

    def ahead(count: int) -> np.ndarray:
        nonlocal stream
        if len(stream) < count:
            fresh = (source.random_sample(max(count, 1 << 20)) * size).astype(np.int64)
            stream = np.concatenate((stream, fresh))
        return stream[:count]

    row = 0
    block = 1024
    while row < size:
        end = min(size, row + block)
        drawn = ahead((end - row) * width).reshape(end - row, width)
        ordered = np.sort(np.concatenate((drawn, near[row:end]), axis=1), axis=1)
        bad = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        good = int(np.argmax(bad)) if bad.any() else end - row
        views[row : row + good] = drawn[:good]
        stream = stream[good * width :]
        used += good * width
        row += good
        if row == end:
            continue
        # the rejection loop of _passive, over the same stream
        taken = {row, *adjacent[row]}
        chosen: list[int] = []
        while len(chosen) < width:
            j = int(ahead(1)[0])
            stream = stream[1:]
            used += 1
            if j not in taken:
                taken.add(j)
                chosen.append(j)
        views[row] = chosen
        row += 1
    # leave rng where the rejection loops would have: ``used`` values past its state
    source.set_state(start)
    while used:
        step = min(used, 1 << 22)
        source.random_sample(step)
        used -= step
    twister = source.get_state(legacy=False)["state"]
    rng.setstate((version, (*twister["key"].tolist(), int(twister["pos"])), gauss_next))
    shared = np.empty(size, dtype=object)
    shared[:] = members
    return shared[views].tolist()  # type: ignore[no-any-return]


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
    return [members[j] for j in chosen]


def _fill_directory(
    node: GossipNode, topic: str, members: list[NodeId], rng: random.Random
) -> None:
    """The contact's reservoirs for ``topic``: uniform samples of the members, as algorithm R
    leaves them once every member has asked and reported its join."""
    directory = node.directory
    size = min(directory.size, len(members))
    directory.fill(topic, rng.sample(members, size), rng.sample(members, size), len(members))
