"""Colluding insiders in the simulator: an adversary model for the gossip stack.

A fraction of the nodes are members with valid identities that collude. They run pubmesh's
own gossip node and follow every membership rule towards each other, but:

* they are a black hole: they never send a payload on (an eager push, a GRAFT's answer), so
  a publication reaches past them only by the others' lazy repair (Plumtree's IHAVE/GRAFT);
* they poison: every Shuffle and ShuffleReply they send names colluders only (the attack on
  peer sampling that Brahms and Basalt are built against: Bortnikov et al., "Brahms:
  Byzantine resilient random membership sampling"; Auvolat et al., "Basalt: A rock-solid
  foundation for epidemic consensus algorithms in very large, very open networks");
* they evict: every ``every`` seconds each sends high-priority Neighbor requests to
  ``pushes`` honest nodes it picks (an omniscient adversary: any honest id), which
  HyParView's rule accepts by dropping a random neighbour, and it keeps such links;
* they take every invitation (ForwardJoinAccept) whenever it comes.

What :func:`run` measures, every ``probe_every`` seconds: each honest node's share of
insiders in its active view, summarized by :func:`summarize` beside what views of the same
sizes drawn uniformly at random would show (the best a sampler that cannot tell insiders from
honest nodes can do, Brahms' goal; with views of 5 and a tenth of insiders, 8% of perfectly
random views hold two or more); at the end, the reliability of honest publications at honest
nodes (publications made in the run's last 5 s are left out: they have no time to arrive).
``bench/bench_insiders.py`` runs it at 1,000 nodes; ``tests/sim/test_insiders.py`` at 200.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import time
from typing import Any

from pubmesh.proto.core import (
    Deliver,
    Message,
    NodeContext,
    NodeId,
    Output,
    Publish,
    Send,
    SetTimer,
    Start,
    Timer,
)
from pubmesh.proto.gossip.hyparview import ForwardJoinAccept, Neighbor, Shuffle, ShuffleReply
from pubmesh.proto.gossip.node import GossipNode
from pubmesh.proto.gossip.plumtree import Gossip

#: one probe: time, mean and 99th-percentile share, fraction of views above the goal, and that
#: fraction for uniformly random views of the same sizes (summarize)
Probe = tuple[float, float, float, float, float]


@dataclasses.dataclass(frozen=True, slots=True)
class AttackTick(Timer):
    pass


class Insider(GossipNode):
    """pubmesh's gossip node with the adversary's changes (module docstring)."""

    colluders: frozenset[NodeId] = frozenset()
    honest: tuple[NodeId, ...] = ()
    pushes = 2
    every = 1.0

    def _corrupt(self, out: list[Output]) -> list[Output]:
        kept: list[Output] = []
        pool = sorted(self.colluders)
        for item in out:
            if isinstance(item, Send):
                message = item.message
                if isinstance(message, Gossip):
                    continue  # a black hole
                if isinstance(message, Shuffle | ShuffleReply):
                    names = tuple(self.rng.sample(pool, min(len(message.nodes), len(pool))))
                    message = dataclasses.replace(message, nodes=names)
                    item = Send(item.dst, message)
            elif isinstance(item, Deliver):
                continue
            kept.append(item)
        return kept

    def handle(self, event: Any, now: float) -> list[Output]:
        out = super().handle(event, now)
        if isinstance(event, Start):
            out.append(SetTimer(self.every * (1 + self.rng.random()), AttackTick()))
        return self._corrupt(out)

    def receive(self, src: NodeId, msg: Message, now: float) -> list[Output]:
        if isinstance(msg, ForwardJoinAccept):
            swarm = self.swarms.get(msg.topic)
            if swarm is not None:  # any time, as many as come
                swarm.membership.invited_until = now + 1e9
                swarm.membership.invites_left = 1 << 30
        return self._corrupt(super().receive(src, msg, now))

    def fire(self, timer: Timer, now: float) -> list[Output]:
        if not isinstance(timer, AttackTick):
            return self._corrupt(super().fire(timer, now))
        out: list[Output] = [SetTimer(self.every, AttackTick())]
        for topic, swarm in self.swarms.items():
            if not swarm.membership.joined:
                continue
            for victim in self.rng.sample(self.honest, self.pushes):
                swarm.membership.asked[victim] = None  # take the accept when it comes
                out.append(Send(victim, Neighbor(topic=topic, high_priority=True)))
        return out


@dataclasses.dataclass(frozen=True)
class InsiderRun:
    """What :func:`run` measured."""

    #: one :func:`summarize` per probe
    shares: list[Probe]
    #: honest (publication, subscriber) pairs delivered, of those expected
    reliability: float
    honest_pubs: int
    insiders: int
    #: the simulation's CPU seconds
    cpu: float


def run(
    scenario: Any,
    *,
    fraction: float = 0.1,
    seed: int = 1,
    pushes: int = 2,
    every: float = 1.0,
    probe_every: float = 10.0,
) -> InsiderRun:
    """Simulate ``scenario`` (a gossip one, every node subscribed to its topic) with a
    ``fraction`` of its nodes, drawn with ``seed``, as colluding insiders (module docstring)."""
    from pubmesh.sim.engine import Simulation

    sim = Simulation(scenario, None)
    rng = random.Random(seed)
    ids = sorted(sim.plan.starts)
    insiders = frozenset(rng.sample(ids, int(len(ids) * fraction)))
    attack = {
        "colluders": insiders,
        "honest": tuple(n for n in ids if n not in insiders and n != min(ids)),
        "pushes": pushes,
        "every": every,
    }
    adversary = type("Insider", (Insider,), attack)
    honest_create = sim.spec.create

    def create(ctx: NodeContext) -> Any:
        return adversary(ctx) if ctx.node_id in insiders else honest_create(ctx)

    sim.spec = dataclasses.replace(sim.spec, create=create)
    shares: list[Probe] = []
    duration = scenario.run.duration
    p = len(insiders) / (len(ids) - 1)

    def probe() -> None:
        views = []
        for node, obj in sim.nodes.items():
            if node in insiders or node not in sim.alive or not isinstance(obj, GossipNode):
                continue
            for swarm in obj.swarms.values():
                active = swarm.membership.active
                if active:
                    views.append((sum(a in insiders for a in active), len(active)))
        if views:
            shares.append(summarize(sim.now, views, p, fraction))
        if sim.now + probe_every <= duration:
            sim.at(sim.now + probe_every, probe)

    sim.at(probe_every, probe)
    publisher: dict[int, NodeId] = {}
    command = sim.command

    def recording(node: NodeId, cmd: Any) -> None:
        # publications with 5 s left to arrive (the run's window cuts later ones short)
        if isinstance(cmd, Publish) and sim.now <= duration - 5:
            publisher[cmd.pub_id] = node
        command(node, cmd)

    sim.command = recording  # type: ignore[assignment, method-assign]
    started = time.process_time()
    sim.run()
    cpu = time.process_time() - started
    honest = [n for n in ids if n not in insiders]
    honest_pubs = {pub for pub, node in publisher.items() if node not in insiders}
    delivered = {
        (pub_id, node)
        for pub_id, node, _t, _h in sim.deliveries
        if node not in insiders and pub_id in honest_pubs
    }
    expected = len(honest_pubs) * len(honest)
    return InsiderRun(
        shares=shares,
        reliability=len(delivered) / expected if expected else math.nan,
        honest_pubs=len(honest_pubs),
        insiders=len(insiders),
        cpu=cpu,
    )


def summarize(t: float, views: list[tuple[int, int]], p: float, fraction: float) -> Probe:
    """One probe of the honest nodes' active views, each ``(insiders in it, its size)``: the
    time, the mean and 99th-percentile share of insiders, the fraction of views whose share is
    above the goal (twice ``fraction``), and that fraction for views of the same sizes drawn
    uniformly at random from the other nodes (``p``: the insiders' share of them), the best
    any sampler that cannot tell insiders from honest nodes can do (Brahms' goal)."""
    values = sorted(bad / size for bad, size in views)
    p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
    goal = 2 * fraction
    above = sum(v > goal + 1e-9 for v in values) / len(values)
    uniform = statistics.fmean(_tail(size, p, goal) for _bad, size in views)
    return (t, statistics.fmean(values), p99, above, uniform)


def _tail(size: int, p: float, goal: float) -> float:
    """P(share > goal) for ``size`` draws each an insider with probability ``p``."""
    return sum(
        math.comb(size, k) * p**k * (1 - p) ** (size - k)
        for k in range(size + 1)
        if k / size > goal + 1e-9
    )


def report(shares: list[Probe], fraction: float, pubs: int, reliability: float) -> None:
    """The table of shares over time and the reliability line (both benches print it)."""
    goal = 2 * fraction
    print(f"share of insiders in honest nodes' active views (goal: ≤ {goal:.2f})")
    print(
        f"{'t s':>6} {'mean':>7} {'p99':>6} {f'> {goal:.2f}':>8} "
        f"{'uniform sample > ' + f'{goal:.2f}':>22}"
    )
    for t, mean, p99, above, uniform in shares:
        print(f"{t:>6.0f} {mean:>7.3f} {p99:>6.3f} {above:>8.3f} {uniform:>22.3f}")
    print(
        f"honest publications {pubs}, reliability at honest nodes {reliability:.4f} (goal ≥ 0.99)"
    )
