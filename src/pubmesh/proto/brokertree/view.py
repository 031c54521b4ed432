"""One node's view of the broker tree: paths, distances, branches and frontiers (Kazemzadeh &
Jacobsen §2.2, §3.2, §3.5; docs/protocols/brokertree.md §2–§3).

Kazemzadeh & Jacobsen gives every node a *topology map*: the nodes within δ + 1 hops, each with its
kind and the topology path to it [P §2.2]. The spec's generator (§2) makes the broker tree a pure
function of the parameters, and each client's broker a pure function of (topology_seed, client id)
(:meth:`Tree.broker_for`), so a node can compute the path to any node it hears of without being told
the tree: the static broker tree, plus the client hanging off its broker. This is how the
simulator's maps are "taken from the generator, cut to δ + 1" (spec §3), and it also covers clients
that come and go (churn, restarts): a client is placed the moment its id is heard, with no Join
message (the spec's Join/TopoSummary of §3 exist to teach a map the tree; here every node already
knows it, see the stack's module essay).

Broker ids are the ``Start`` contacts, in ordinal order (the stack names its brokers as the
cluster's well-known nodes): in the simulator ids 0 … B−1; over TCP their addresses. The
generator runs over ordinals, so every node, in either runtime, builds the same tree.

Radius δ + 1 (spec §3: [P §5.7]'s 3δ + 1 is seqVect history, not map radius). A path is the
list of nodes after the owner, the target last.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Sequence

from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.brokertree.topology import Tree
from pubmesh.proto.core import NodeId


class View:
    """The tree as seen from ``me``: brokers from the generator, clients by their attach
    broker. ``known_clients`` are the clients this node has heard of (a bypass reaches the
    clients of a failed broker only if it knows them)."""

    __slots__ = (
        "_attach",
        "_distance",
        "_frontier",
        "_path_cache",
        "anchor",
        "brokers",
        "delta",
        "known_clients",
        "me",
        "ordinal",
        "parent",
        "reach",
        "tree",
    )

    def __init__(self, params: BrokerTreeParams, brokers: Sequence[NodeId], me: NodeId) -> None:
        if len(brokers) < 2:
            raise ValueError(f"a broker tree needs at least 2 brokers, got {len(brokers)}")
        self.brokers: tuple[NodeId, ...] = tuple(brokers)
        self.ordinal = {b: k for k, b in enumerate(self.brokers)}
        if len(self.ordinal) != len(self.brokers):
            raise ValueError("broker ids must be distinct")
        self.tree = Tree(dataclasses.replace(params, brokers=len(self.brokers)))
        self.delta = params.delta
        self.reach = params.delta + 1
        self.me = me
        self.known_clients: set[NodeId] = set()
        self._attach: dict[NodeId, NodeId] = {}
        self._distance: dict[tuple[NodeId, NodeId], int] = {}
        #: the broker the owner's paths start from: itself, or a client's broker
        self.anchor = me if me in self.ordinal else self.attach(me)
        #: BFS parent of every broker towards the anchor (the whole broker tree: B ≤ 10³)
        self.parent: dict[NodeId, NodeId | None] = {self.anchor: None}
        queue = deque([self.anchor])
        while queue:
            x = queue.popleft()
            for y in self.broker_neighbours(x):
                if y not in self.parent:
                    self.parent[y] = x
                    queue.append(y)
        self._path_cache: dict[NodeId, tuple[NodeId, ...]] = {}
        self._frontier: dict[NodeId, frozenset[NodeId]] | None = None

    # ------------------------------------------------------------------ kinds and edges
    def is_broker(self, node: NodeId) -> bool:
        return node in self.ordinal

    def is_me_broker(self) -> bool:
        return self.me in self.ordinal

    def attach(self, client: NodeId) -> NodeId:
        """The broker a client hangs off (spec §2: a pure function of topology_seed and id)."""
        broker = self._attach.get(client)
        if broker is None:
            if len(self._attach) > 100_000:
                self._attach.clear()
            broker = self._attach[client] = self.brokers[self.tree.broker_for(client)]
        return broker

    def broker_neighbours(self, broker: NodeId) -> list[NodeId]:
        return [self.brokers[k] for k in self.tree.adj[self.ordinal[broker]]]

    def neighbours(self, node: NodeId) -> list[NodeId]:
        """Tree neighbours of ``node``: a broker's brokers and the clients known to hang off
        it (the owner counts itself as known), a client's broker."""
        if node not in self.ordinal:
            return [self.attach(node)]
        out = self.broker_neighbours(node)
        clients = [c for c in self.known_clients if self.attach(c) == node]
        if self.me not in self.ordinal and self.anchor == node:
            clients.append(self.me)
        out.extend(sorted(set(clients)))
        return out

    # ------------------------------------------------------------------ paths
    def path(self, node: NodeId) -> tuple[NodeId, ...]:
        """The topology path from the owner to ``node`` (Kazemzadeh & Jacobsen §2.2): the nodes
        after the owner, ``node`` last; () for the owner."""
        cached = self._path_cache.get(node)
        if cached is not None:
            return cached
        if node == self.me:
            result: tuple[NodeId, ...] = ()
        else:
            target = node if node in self.ordinal else self.attach(node)
            back: list[NodeId] = []
            x: NodeId | None = target
            while x is not None:
                back.append(x)
                x = self.parent[x]
            back.reverse()  # anchor … target
            if self.me in self.ordinal:
                back = back[1:]  # drop the owner (the anchor)
            if node not in self.ordinal:
                if back and back[-1] == node:  # cannot happen: a client is no broker
                    back.pop()
                back.append(node)
            result = tuple(back)
        if len(self._path_cache) > 100_000:
            self._path_cache.clear()
        self._path_cache[node] = result
        return result

    def dist(self, node: NodeId) -> int:
        return len(self.path(node))

    def in_map(self, node: NodeId) -> bool:
        """Within δ + 1 hops (spec §3)."""
        return 0 < self.dist(node) <= self.reach

    def distance(self, a: NodeId, b: NodeId) -> int:
        """Hops between two nodes."""
        if a == b:
            return 0
        key = (a, b) if a < b else (b, a)
        known = self._distance.get(key)
        if known is not None:
            return known
        pa, pb = self.path(a), self.path(b)
        common = 0
        for x, y in zip(pa, pb, strict=False):
            if x != y:
                break
            common += 1
        hops = len(pa) + len(pb) - 2 * common
        if len(self._distance) > 100_000:
            self._distance.clear()
        self._distance[key] = hops
        return hops

    def from_of(self, subscriber: NodeId) -> NodeId:
        """``from`` of a subscription tuple here [P §2.2]: the subscriber if it is at most δ + 1
        hops away, else the node on the path to it δ + 1 hops away. Kazemzadeh & Jacobsen reads it
        off the seqVect (spec §5 STEP-II: ``vect[δ]``), which is the same node when the subscription
        travelled the tree path (the spec's [D1]); read off the tree it is also right for a tuple
        that reached us by a summary around a failed node."""
        path = self.path(subscriber)
        return subscriber if len(path) <= self.reach else path[self.reach - 1]

    def branch(self, node: NodeId) -> NodeId:
        """The owner's neighbour on the path to ``node``."""
        return self.path(node)[0]

    def between(self, node: NodeId) -> tuple[NodeId, ...]:
        """The nodes strictly between the owner and ``node``, in path order from the owner."""
        return self.path(node)[:-1]

    def far_side(self, node: NodeId) -> list[NodeId]:
        """Neighbours of ``node`` farther from the owner than it, within δ + 1 hops (spec §4:
        the nodes a bypass of ``node`` opens sessions to)."""
        path = self.path(node)
        closer = path[-2] if len(path) >= 2 else self.me
        return [
            z
            for z in self.neighbours(node)
            if z != closer and z != self.me and self.dist(z) <= self.reach
        ]

    def on_path(self, hop: NodeId, target: NodeId) -> bool:
        """Does the path to ``target`` pass through (or end at) ``hop``?"""
        return hop in self.path(target)

    # ------------------------------------------------------------------ frontiers
    def frontier(self) -> dict[NodeId, frozenset[NodeId]]:
        """RCPT of a subscription by branch [P §3.5] (spec §5): in each branch, the brokers
        within δ + 1 hops with no broker beyond them within δ + 1 (those at δ + 1, and the last
        brokers of branches that end sooner). A client's one branch is its broker's."""
        if self._frontier is not None:
            return self._frontier
        inside = [b for b in self.brokers if b != self.me and self.dist(b) <= self.reach]
        beyond: set[NodeId] = set()
        for b in inside:
            beyond.update(self.between(b))
        by_branch: dict[NodeId, set[NodeId]] = {}
        for b in inside:
            if b not in beyond:
                by_branch.setdefault(self.branch(b), set()).add(b)
        self._frontier = {k: frozenset(v) for k, v in by_branch.items()}
        return self._frontier

    def frontier_except(self, upstream: Iterable[NodeId]) -> frozenset[NodeId]:
        """The frontier in every branch but the ``upstream`` ones."""
        skip = set(upstream)
        out: set[NodeId] = set()
        for branch, nodes in self.frontier().items():
            if branch not in skip:
                out |= nodes
        return frozenset(out)

    def learn_client(self, node: NodeId) -> bool:
        """Note a client heard of; True if it is new and within the map."""
        if node in self.ordinal or node == self.me or node in self.known_clients or node < 0:
            return False
        if self.dist(node) > self.reach:
            return False
        self.known_clients.add(node)
        return True
