"""Many small gossip swarms joining at once, driven in-process with link latency: the harness of
the swarm-convergence figure (its claim: "2,000 topics with 4–12 subscribers each, all joining
within 1 s; after 3 shuffle periods every swarm is one component and a publication reaches
every subscriber").

Each topic is its own swarm (HyParView and Plumtree keep per-topic state; only the contact's
directory is shared, and it too is kept per topic), so every topic runs as an independent
cluster: node 0 is the contact and subscribes to nothing, nodes 1..k subscribe at uniform random
times in [0, 1) s. Messages take a uniform 5–50 ms and stay in order per link (TCP, as the
HyParView paper assumes); no message is lost and no node fails. At ``3 × shuffle_interval`` the
harness takes the subscribers' active-view graph, then the first subscriber publishes and the
cluster runs ``PUBLISH_WINDOW`` seconds more.

Used by ``tests/proto/gossip/test_gossip_swarms.py`` (one seed, a sample of topics) and
``bench/bench_swarms.py`` (2,000 topics, more seeds).
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from dataclasses import dataclass

from pubmesh.proto.core import (
    Deliver,
    Input,
    NodeContext,
    Publish,
    Receive,
    Send,
    SetTimer,
    Start,
    Subscribe,
    TimerFired,
)
from pubmesh.proto.gossip import GossipNode, GossipParams

TOPIC = "t"
#: seconds the publication has to reach every subscriber (Plumtree's lazy repair included)
PUBLISH_WINDOW = 5.0
LATENCY = (0.005, 0.050)


@dataclass(frozen=True)
class SwarmOutcome:
    topic: int
    subscribers: int
    #: the subscribers' active-view graph's components at 3 shuffle periods
    components: tuple[tuple[int, ...], ...]
    #: subscribers that did not deliver the publication (the publisher is subscriber 1)
    missed: tuple[int, ...]

    @property
    def whole(self) -> bool:
        return len(self.components) == 1 and not self.missed


def run_swarm(topic: int, subscribers: int, seed: int, params: GossipParams) -> SwarmOutcome:
    """One topic's swarm: ``subscribers`` nodes (1..k) join through the contact 0 within 1 s."""
    rng = random.Random(f"{seed}/{topic}")
    nodes = {
        i: GossipNode(NodeContext(i, random.Random(rng.getrandbits(64)), "peer", params))
        for i in range(subscribers + 1)
    }
    queue: list[tuple[float, int, int, Input]] = []
    sequence = 0
    link_clock: dict[tuple[int, int], float] = {}
    delivered: set[int] = set()

    def push(at: float, node: int, event: Input) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(queue, (at, sequence, node, event))

    def handle(node: int, event: Input, now: float) -> None:
        for out in nodes[node].handle(event, now):
            if isinstance(out, Send):
                # FIFO per link: never before the previous message on the same link
                at = max(now + rng.uniform(*LATENCY), link_clock.get((node, out.dst), 0.0))
                link_clock[(node, out.dst)] = at
                push(at, out.dst, Receive(node, out.message))
            elif isinstance(out, SetTimer):
                push(now + out.after, node, TimerFired(out.timer))
            elif isinstance(out, Deliver):
                delivered.add(node)

    def run_until(horizon: float) -> None:
        while queue and queue[0][0] <= horizon:
            at, _seq, node, event = heapq.heappop(queue)
            handle(node, event, at)

    for i in nodes:
        handle(i, Start((0,)), 0.0)
    for i in range(1, subscribers + 1):
        push(rng.random(), i, Subscribe(TOPIC))
    checked_at = 3 * params.shuffle_interval
    run_until(checked_at)
    components = _components(nodes, range(1, subscribers + 1))
    handle(1, Publish(TOPIC, 1, b"p"), checked_at)
    run_until(checked_at + PUBLISH_WINDOW)
    missed = tuple(i for i in range(1, subscribers + 1) if i not in delivered)
    return SwarmOutcome(topic, subscribers, components, missed)


def _components(nodes: dict[int, GossipNode], members: range) -> tuple[tuple[int, ...], ...]:
    """Connected components of the members' active views (symmetric or not: an edge either way
    joins two members)."""
    parent = {i: i for i in members}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in members:
        swarm = nodes[i].swarms.get(TOPIC)
        for j in swarm.membership.active if swarm is not None else ():
            if j in parent:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in members:
        groups.setdefault(find(i), []).append(i)
    return tuple(sorted(tuple(g) for g in groups.values()))


def run_swarms(
    topics: int, seed: int, params: GossipParams, sizes: tuple[int, int] = (4, 12)
) -> list[SwarmOutcome]:
    """``topics`` swarms of ``sizes[0]``–``sizes[1]`` subscribers each (uniform)."""
    rng = random.Random(seed)
    return [run_swarm(t, rng.randint(*sizes), seed, params) for t in range(topics)]


#: the figure's two view sizes: active views of 3, and the default (fanout 4 + 1 = 5)
VIEWS = {"active 3": dataclasses.replace(GossipParams(), fanout=2), "default": GossipParams()}
