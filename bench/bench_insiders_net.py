"""Insiders over real sockets: ``bench/bench_insiders.py``'s colluding insiders, as
node runtimes in identity mode (TLS 1.3, signed publications) on loopback.

Every node is a :class:`pubmesh.net.runtime.NodeRuntime` of its own, with its own listening
socket, certificate and TLS links; they share one asyncio loop in this process (a cluster of
processes would measure the same rules at a higher cost in start-up, not different views).
A tenth of them run the ``Insider`` of :mod:`pubmesh.sim.insiders` (black holes for
payloads, poisoned shuffles, every invitation taken, forced high-priority links at honest
nodes every second). After the
swarm settles, honest nodes publish twice a second for ``--seconds``; every ten seconds the
honest nodes' share of insiders in their HyParView active views is read, and at the end the
honest publications' reliability at honest nodes (publications made in the last 5 s left
out).

    PYTHONPATH=src .venv/bin/python bench/bench_insiders_net.py [--nodes 30] [--fraction 0.1]
        [--seconds 60] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pubmesh.net.identity import init_authority, issue  # noqa: E402
from pubmesh.net.runtime import NodeRuntime  # noqa: E402
from pubmesh.proto.core import Deliver, NodeContext  # noqa: E402
from pubmesh.proto.gossip.node import GossipNode  # noqa: E402
from pubmesh.sim.insiders import Insider, Probe, report, summarize  # noqa: E402
from pubmesh.stacks.base import get_stack  # noqa: E402


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _view(runtime: NodeRuntime, insiders: frozenset[int]) -> tuple[int, int] | None:
    """(insiders in the node's active view, its size), None without one."""
    node = runtime.node
    if not isinstance(node, GossipNode) or "news" not in node.swarms:
        return None
    active = node.swarms["news"].membership.active
    return (sum(a in insiders for a in active), len(active)) if active else None


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    init_authority(tmp / "ca")
    identities = [
        issue(tmp / "ca", f"127.0.0.1:{_port()}", tmp / f"n{i}") for i in range(args.nodes)
    ]
    ids = [identity.node for identity in identities]
    contact = ids[0]
    insiders = frozenset(rng.sample(ids[1:], int(args.nodes * args.fraction)))
    honest_ids = tuple(n for n in ids[1:] if n not in insiders)
    adversary = type("Insider", (Insider,), {"colluders": insiders, "honest": honest_ids})
    gossip = get_stack("gossip")

    def create(ctx: NodeContext) -> Any:
        return adversary(ctx)

    evil = dataclasses.replace(gossip, create=create)
    runtimes: dict[int, NodeRuntime] = {}
    delivered: set[tuple[int, int]] = set()
    for identity in identities:
        node = identity.node
        runtime = NodeRuntime(
            evil if node in insiders else gossip,
            identity=identity,
            listen=("127.0.0.1", int(identity.address.rsplit(":", 1)[1])),
            contacts=() if node == contact else (contact,),
            seed=rng.randrange(1 << 62),
        )
        if node not in insiders:

            def record(out: Deliver, _t: float, n: int = node) -> None:
                delivered.add((out.pub_id, n))

            runtime.delivery_callbacks.append(record)
        runtimes[node] = runtime
        await runtime.start()
        runtime.subscribe("news")
        await asyncio.sleep(0.05)
    honest = [n for n in ids if n not in insiders]
    await asyncio.sleep(args.settle)
    shares: list[Probe] = []
    published: list[int] = []
    started = time.monotonic()
    next_probe = 0.0
    while (elapsed := time.monotonic() - started) < args.seconds:
        if elapsed >= next_probe:
            views = [v for n in honest if (v := _view(runtimes[n], insiders)) is not None]
            if views:
                p = len(insiders) / (len(ids) - 1)
                shares.append(summarize(elapsed, views, p, args.fraction))
            next_probe += 10.0
        if elapsed <= args.seconds - 5:
            publisher = runtimes[rng.choice(honest)]
            published.append(publisher.publish("news", b"x" * 100))
        await asyncio.sleep(0.5)
    await asyncio.sleep(2.0)
    expected = len(published) * len(honest)
    got = sum(1 for pub in published for n in honest if (pub, n) in delivered)
    for runtime in runtimes.values():
        await runtime.close()
    return {
        "shares": shares,
        "reliability": got / expected if expected else float("nan"),
        "publications": len(published),
        "honest": len(honest),
        "insiders": len(insiders),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds before measuring")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cpu = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    print(f"{result['honest']} honest nodes, {result['insiders']} insiders")
    report(result["shares"], args.fraction, result["publications"], result["reliability"])
    print(f"CPU {time.process_time() - cpu:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
