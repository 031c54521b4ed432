"""The swarm-convergence figure: many topics of 4–12 subscribers each, all joining
within 1 s, no fault; after three shuffle periods, how many swarms are one component and
delivered a publication to every subscriber. Active views of 3 and the default, both trees.

    .venv/bin/python bench/bench_swarms.py [--topics 2000] [--seeds 1,2,3,4,5]

The harness is ``tests/support/swarms.py`` (the test
``tests/proto/gossip/test_gossip_swarms.py`` runs one seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.swarms import VIEWS, run_swarms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=2000, help="swarms per run (2000)")
    parser.add_argument("--seeds", default="1,2,3,4,5", help="comma-separated seeds (1..5)")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(
        f"{'views':9} {'tree':9} {'seed':>4} {'swarms':>7} {'split':>6} {'missed':>7} {'CPU s':>6}"
    )
    failed = 0
    for view, base in VIEWS.items():
        for tree in ("rooted", "plumtree"):
            for seed in seeds:
                started = time.process_time()
                outcomes = run_swarms(args.topics, seed, dataclasses.replace(base, tree=tree))
                split = sum(len(o.components) > 1 for o in outcomes)
                missed = sum(bool(o.missed) for o in outcomes)
                failed += split + missed
                cpu = time.process_time() - started
                print(
                    f"{view:9} {tree:9} {seed:>4} {len(outcomes):>7} {split:>6} {missed:>7}"
                    f" {cpu:>6.1f}",
                    flush=True,
                )
    print("every swarm whole" if not failed else f"{failed} swarms split or missed a delivery")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
