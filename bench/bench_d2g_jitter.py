"""Benchmark: d2g's flood in small steady groups under jittered latency
(tests/proto/d2g/test_d2g_figures.py C9 at more seeds and a wider jitter).

Twelve nodes, three topics of about eight members, 40 publications at 20/s once subscribed
(the JITTERED scenario of the C9 test), one simulation per seed and latency; printed per
latency: the seeds that lost a delivery, the missing (publication, subscriber) pairs against
those expected, and the longest stretch a member missed.

    .venv/bin/python bench/bench_d2g_jitter.py                     # seeds 0..99, σ 1 and 1.5
    .venv/bin/python bench/bench_d2g_jitter.py --seeds 20 --sigmas 1.0
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "proto" / "d2g"))
from test_d2g_figures import JITTERED

from pubmesh.scenario.model import parse_scenario
from pubmesh.sim.runner import run_scenario
from support.reliability import delivered_pairs, expected_pairs, publish_times


def one(seed: int, median: float, sigma: float) -> tuple[int, int, float]:
    """(missing, expected, longest stretch in s) of one run."""
    text = JITTERED.format(seed=seed).replace(
        "median = 0.002, sigma = 1.0", f"median = {median}, sigma = {sigma}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        run_scenario(parse_scenario(text), Path(tmp))
        expected, delivered = expected_pairs(Path(tmp)), delivered_pairs(Path(tmp))
        at = publish_times(Path(tmp))
    missing = expected - delivered
    by_node: dict[int, list[float]] = {}
    for pub_id, node in missing:
        by_node.setdefault(node, []).append(at[pub_id])
    longest = max((max(t) - min(t) + 0.05 for t in by_node.values()), default=0.0)
    return len(missing), len(expected), longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100, help="seeds 0..N-1 (default 100)")
    parser.add_argument("--sigmas", default="1.0,1.5", help="lognormal σ of the latency")
    args = parser.parse_args()
    print("| latency | seeds losing | missing / expected | longest stretch |")
    print("|---|---|---|---|")
    for sigma in (float(s) for s in args.sigmas.split(",")):
        median = 0.002 if sigma <= 1.0 else 0.005
        losing, missing, expected, longest = 0, 0, 0, 0.0
        for seed in range(args.seeds):
            m, e, stretch = one(seed, median, sigma)
            losing += m > 0
            missing += m
            expected += e
            longest = max(longest, stretch)
            print(f"\r  σ {sigma}: seed {seed + 1}/{args.seeds}", end="", file=sys.stderr)
        print(file=sys.stderr)
        print(
            f"| lognormal {median * 1000:.0f} ms, σ {sigma} | {losing} of {args.seeds} | "
            f"{missing} / {expected} | {longest * 1000:.0f} ms |"
        )


if __name__ == "__main__":
    main()
