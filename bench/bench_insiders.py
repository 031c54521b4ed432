"""Issue 58's goal, measured in the simulator: a tenth of the nodes are colluding insiders;
does an honest node's active view keep their share within twice their share of the
population (0.2), and do honest nodes deliver at least 0.99 of honest publications?

The swarm is ``scenarios/gossip_1000.toml`` (1,000 nodes, one topic, everyone subscribed,
100 publications from t = 30 s). The insiders run pubmesh's own gossip node and follow every
membership rule towards each other, but:

* they are a black hole: they never send a payload on (an eager push, a GRAFT's answer), so
  a publication reaches past them only by the others' lazy repair;
* they poison: every Shuffle and ShuffleReply they send names colluders only;
* they evict: every ``--every`` seconds each sends high-priority Neighbor requests to
  ``--pushes`` honest nodes it picks (an omniscient adversary: any honest id), which
  HyParView accepts by dropping a random neighbour, and it keeps such links;
* they take every invitation (ForwardJoinAccept) whenever it comes.

The table gives, every ten seconds, the honest nodes' mean and 99th-percentile share of
insiders in their active views, and at the end the honest publications' reliability (pairs
of an honest publication and an honest subscriber delivered, of those expected; publications
made in the run's last 5 s are left out, as they have no time to arrive).

    PYTHONPATH=src .venv/bin/python bench/bench_insiders.py [--nodes 1000] [--fraction 0.1]
        [--seed 1] [--pushes 2] [--every 1.0] [--duration 135]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pubmesh.proto.core import (  # noqa: E402
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
from pubmesh.proto.gossip.hyparview import (  # noqa: E402
    ForwardJoinAccept,
    Neighbor,
    Shuffle,
    ShuffleReply,
)
from pubmesh.proto.gossip.node import GossipNode  # noqa: E402
from pubmesh.proto.gossip.plumtree import Gossip  # noqa: E402

SCENARIO = ROOT / "scenarios" / "gossip_1000.toml"


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


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pubmesh.scenario.model import load_scenario
    from pubmesh.sim.engine import Simulation

    sets = [
        f"run.nodes={args.nodes}",
        f"run.seed={args.seed}",
        f"run.duration={args.duration}",
        "trace.messages=counts",
        "trace.snapshot_interval=0",
    ]
    scenario = load_scenario(SCENARIO, sets)
    sim = Simulation(scenario, None)
    rng = random.Random(args.seed)
    ids = sorted(sim.plan.starts)
    insiders = frozenset(rng.sample(ids, int(len(ids) * args.fraction)))
    Insider.colluders = insiders
    Insider.honest = tuple(n for n in ids if n not in insiders and n != min(ids))
    Insider.pushes, Insider.every = args.pushes, args.every
    honest_create = sim.spec.create

    def create(ctx: NodeContext) -> Any:
        return Insider(ctx) if ctx.node_id in insiders else honest_create(ctx)

    sim.spec = dataclasses.replace(sim.spec, create=create)
    shares: list[tuple[float, float, float]] = []

    def probe() -> None:
        values = []
        for node, obj in sim.nodes.items():
            if node in insiders or node not in sim.alive or not isinstance(obj, GossipNode):
                continue
            for swarm in obj.swarms.values():
                active = swarm.membership.active
                if active:
                    values.append(sum(a in insiders for a in active) / len(active))
        if values:
            values.sort()
            p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
            shares.append((sim.now, statistics.fmean(values), p99))
        if sim.now + 10 <= args.duration:
            sim.at(sim.now + 10, probe)

    sim.at(10.0, probe)
    publisher: dict[int, NodeId] = {}
    command = sim.command

    def recording(node: NodeId, cmd: Any) -> None:
        # publications with 5 s left to arrive (the run's window cuts later ones short)
        if isinstance(cmd, Publish) and sim.now <= args.duration - 5:
            publisher[cmd.pub_id] = node
        command(node, cmd)

    sim.command = recording  # type: ignore[assignment, method-assign]
    started = time.process_time()
    sim.run()
    cpu = time.process_time() - started
    honest = [n for n in ids if n not in insiders]
    honest_pubs = {p for p, node in publisher.items() if node not in insiders}
    delivered = {
        (pub_id, node)
        for pub_id, node, _t, _h in sim.deliveries
        if node not in insiders and pub_id in honest_pubs
    }
    expected = len(honest_pubs) * len(honest)
    return {
        "shares": shares,
        "reliability": len(delivered) / expected if expected else float("nan"),
        "honest_pubs": len(honest_pubs),
        "cpu": cpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pushes", type=int, default=2, help="honest nodes each insider pushes")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between pushes")
    parser.add_argument("--duration", type=float, default=135.0)
    args = parser.parse_args()
    result = run(args)
    report(result["shares"], args.fraction, result["honest_pubs"], result["reliability"])
    print(f"simulation CPU {result['cpu']:.1f} s")
    return 0


def report(
    shares: list[tuple[float, float, float]], fraction: float, pubs: int, reliability: float
) -> None:
    """The table of shares over time and the reliability line (both benches print it)."""
    print(f"{'t s':>6} {'mean share':>11} {'p99 share':>10}   (goal: ≤ {2 * fraction:.2f})")
    for t, mean, p99 in shares:
        print(f"{t:>6.0f} {mean:>11.3f} {p99:>10.3f}")
    print(
        f"honest publications {pubs}, reliability at honest nodes {reliability:.4f} (goal ≥ 0.99)"
    )


if __name__ == "__main__":
    sys.exit(main())
