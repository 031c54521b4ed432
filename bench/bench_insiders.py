"""Membership against insiders, in the simulator: a tenth of the nodes are colluding insiders
(the adversary of :mod:`pubmesh.sim.insiders`); does an honest node's active view keep their
share within twice their share of the population (0.2), and do honest nodes deliver at least
0.99 of honest publications?

The swarm is ``scenarios/gossip_1000.toml`` (1,000 nodes, one topic, everyone subscribed,
100 publications from t = 30 s). The table gives, every ten seconds, the honest nodes' mean
and 99th-percentile share of insiders in their active views, the fraction of honest views
above the goal and, beside it, that fraction for views of the same sizes drawn uniformly at
random; then the honest publications' reliability at honest nodes.

    PYTHONPATH=src .venv/bin/python bench/bench_insiders.py [--nodes 1000] [--fraction 0.1]
        [--seed 1] [--pushes 2] [--every 1.0] [--duration 135] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pubmesh.scenario.model import load_scenario  # noqa: E402
from pubmesh.sim import insiders  # noqa: E402

SCENARIO = ROOT / "scenarios" / "gossip_1000.toml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pushes", type=int, default=2, help="honest nodes each insider pushes")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between pushes")
    parser.add_argument("--duration", type=float, default=135.0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a scenario override, e.g. stack.gossip.forced_evictions=0 (the paper's rule: "
        "every high-priority Neighbor evicts)",
    )  # fmt: skip
    args = parser.parse_args()
    sets = [
        f"run.nodes={args.nodes}",
        f"run.seed={args.seed}",
        f"run.duration={args.duration}",
        "trace.messages=counts",
        "trace.snapshot_interval=0",
        *args.set,
    ]
    result = insiders.run(
        load_scenario(SCENARIO, sets),
        fraction=args.fraction,
        seed=args.seed,
        pushes=args.pushes,
        every=args.every,
    )
    insiders.report(result.shares, args.fraction, result.honest_pubs, result.reliability)
    print(f"simulation CPU {result.cpu:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
