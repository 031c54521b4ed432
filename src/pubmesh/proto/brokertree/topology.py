"""The broker tree and each node's topology map (Kazemzadeh & Jacobsen §2.2;
docs/protocols/brokertree.md §2–§3).

Kazemzadeh & Jacobsen organizes every node (brokers, publishers, subscribers) in one tree. Each node
keeps a *topology map*: "the layout of other peers in the topology within a certain radius (δ + 1
hops away)" [P §1], with each one's kind and "the *topology path* to nodes in the topology map" [P
§2.2]. The paper's deployment builds the tree by joins (its [14, 17], not public); the spec §2 gives
a seeded generator instead, so that every node of a run computes the same tree from the parameters
alone:

* ``layout = "random"``: broker k ≥ 1 attaches to a broker j < k drawn uniformly among those
  with fewer than ``max_degree`` broker neighbours; a client attaches to a broker drawn
  uniformly (``attach = "any"``) or among the leaves of the broker tree (``"leaves"``).
* ``layout = "chain3"``: brokers 0–1–2 in a line (the core of Kazemzadeh & Jacobsen Figs. 14/15,
  "core
  degree 11"); the next 3·``core_fanout`` nodes in id order are their edge nodes, ``core_fanout``
  each; later brokers attach as in ``random`` among the non-core brokers, and later clients
  to a non-core broker by ``attach`` [R: the spec fixes the core, not who fills the edges].

Brokers are drawn from one stream seeded by ``topology_seed``; each client draws from its own
stream seeded by (topology_seed, id) (spec §2 asks this of churn clients, ids ≥ n; we use it for
every client, so a client's place does not depend on how many clients the run has).

The map of node X is every node within δ + 1 hops, each with its tree path from X (spec §3:
the radius is δ + 1; [P §5.7]'s 3δ + 1 is the seqVect history, not the map).
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.core import NodeId

BROKER, CLIENT = "broker", "client"


def wiring(params: BrokerTreeParams, brokers: tuple[NodeId, ...]) -> int:
    """A 64-bit digest of what every node must agree on to compute the same tree (spec §2):
    the broker list in its order and the parameters that shape the tree. Sessions exchange it
    in Hello and HelloAck and refuse a mismatch (ours)."""
    shape = (
        tuple(brokers),
        params.brokers,
        params.delta,
        params.layout,
        params.core_fanout,
        params.max_degree,
        params.attach,
        params.topology_seed,
    )
    digest = hashlib.sha256(f"pubmesh:brokertree:wiring:{shape!r}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _client_random(topology_seed: int, node: NodeId) -> random.Random:
    digest = hashlib.sha256(f"pubmesh:brokertree:{topology_seed}:{node}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class Tree:
    """The undirected tree over brokers 0 … B−1 and the clients attached to them."""

    def __init__(self, params: BrokerTreeParams) -> None:
        self.params = params
        self.adj: dict[NodeId, list[NodeId]] = {b: [] for b in range(params.brokers)}
        #: each client's broker
        self.attach_of: dict[NodeId, NodeId] = {}
        self._broker_degree = [0] * params.brokers
        rng = random.Random(params.topology_seed)
        core = 3 if params.layout == "chain3" else 0
        if core:
            self._link(0, 1)
            self._link(1, 2)
        edge_slots = 3 * params.core_fanout if core else 0
        for k in range(max(core, 1), params.brokers):
            if k - core < edge_slots:
                self._link(k, (k - core) // params.core_fanout)
                continue
            open_ = [j for j in range(core, k) if self._broker_degree[j] < params.max_degree]
            if not open_:  # chain3 with no free non-core broker yet, or max_degree exhausted
                open_ = [j for j in range(k) if self._broker_degree[j] < params.max_degree]
            if not open_:
                open_ = list(range(k))
            self._link(k, rng.choice(open_))
        #: brokers a client may attach to (the non-core ones in chain3, when there are any)
        pool = list(range(core, params.brokers)) or list(range(params.brokers))
        if params.attach == "leaves":
            leaves = [b for b in pool if self._broker_degree[b] <= 1]
            pool = leaves or pool
        self._client_pool = pool
        self._edge_clients = max(0, edge_slots - (params.brokers - core))

    def _link(self, a: NodeId, b: NodeId) -> None:
        self.adj[a].append(b)
        self.adj[b].append(a)
        if a < self.params.brokers and b < self.params.brokers:
            self._broker_degree[a] += 1
            self._broker_degree[b] += 1

    def is_broker(self, node: NodeId) -> bool:
        return 0 <= node < self.params.brokers

    def broker_for(self, client: NodeId) -> NodeId:
        """The broker ``client`` attaches to (computed the same way by every node)."""
        p = self.params
        first_edge_client = p.brokers
        index = client - first_edge_client
        if p.layout == "chain3" and 0 <= index < self._edge_clients:
            slot = (p.brokers - 3) + index  # edge slots taken by brokers come first
            return slot // p.core_fanout
        return _client_random(p.topology_seed, client).choice(self._client_pool)

    def add_clients(self, clients: Iterable[NodeId]) -> None:
        """Attach ``clients`` (ids ≥ brokers) to their brokers."""
        for client in clients:
            if self.is_broker(client) or client in self.attach_of:
                continue
            broker = self.broker_for(client)
            self.attach_of[client] = broker
            self.adj[client] = []
            self._link(client, broker)

    def broker_degree(self, broker: NodeId) -> int:
        """Broker neighbours of ``broker`` (the generator's ``max_degree`` bound)."""
        return self._broker_degree[broker]

    def nodes(self) -> Iterator[NodeId]:
        return iter(self.adj)

    def map_of(self, node: NodeId, radius: int | None = None) -> TopologyMap:
        """``node``'s topology map: every node within ``radius`` (default δ + 1) hops."""
        reach = self.params.delta + 1 if radius is None else radius
        parent: dict[NodeId, NodeId | None] = {node: None}
        depth = {node: 0}
        queue = deque([node])
        while queue:
            x = queue.popleft()
            if depth[x] == reach:
                continue
            for y in self.adj[x]:
                if y not in parent:
                    parent[y] = x
                    depth[y] = depth[x] + 1
                    queue.append(y)
        return TopologyMap(node, reach, parent, frozenset(b for b in parent if self.is_broker(b)))


def build_tree(params: BrokerTreeParams, nodes: int) -> Tree:
    """The tree of a run with ``nodes`` nodes: brokers 0 … B−1, clients B … nodes−1."""
    tree = Tree(params)
    tree.add_clients(range(params.brokers, nodes))
    return tree


@dataclass(frozen=True)
class TopologyMap:
    """The nodes within ``radius`` hops of ``owner``, with the tree path to each (spec §3)."""

    owner: NodeId
    radius: int
    #: BFS parent of each node in the map, towards the owner (the owner's is None)
    parent: dict[NodeId, NodeId | None]
    brokers: frozenset[NodeId]

    def __contains__(self, node: object) -> bool:
        return node in self.parent

    def __len__(self) -> int:
        return len(self.parent)

    def path(self, node: NodeId) -> list[NodeId]:
        """The topology path from the owner to ``node``: the nodes after the owner, ``node``
        last (Kazemzadeh & Jacobsen §2.2). Empty for the owner itself; KeyError outside the map."""
        out: list[NodeId] = []
        x: NodeId | None = node
        while x is not None and x != self.owner:
            out.append(x)
            x = self.parent[x]
        out.reverse()
        return out

    def dist(self, node: NodeId) -> int:
        """Hops from the owner to ``node`` (spec §3: dist(X) = |path|)."""
        return len(self.path(node))

    def neighbours(self) -> list[NodeId]:
        """The owner's tree neighbours."""
        return sorted(x for x, p in self.parent.items() if p == self.owner)

    def branch(self, node: NodeId) -> NodeId:
        """The owner's neighbour on the path to ``node`` (the branch ``node`` lies in)."""
        return self.path(node)[0]

    def at_distance(self, hops: int) -> list[NodeId]:
        return sorted(x for x in self.parent if self.dist(x) == hops)
