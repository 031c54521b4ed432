"""Chord routing tables on workload W1: conjunctions per edge for the three routing modes.

docs/protocols/chord.md §11.8 gives, for W1 at N = 1,000 (3 subscriptions a node), the subscription
conjunctions per edge filter, mean/max: simple 323/1584, covering 141/514, covering + perfect
merge 58/172. This builds the W1 overlay warm (every edge filter at its fixpoint, exactly what
the protocol's filter waves converge to) for each mode and counts, on every edge, the
conjunctions that are subscriptions (the maintenance intervals, hulled to ≤ 4 per topic, are
left out). ``merging`` runs with max_conj and max_in lifted (scenarios/chord_w1.toml), so its
merges are the perfect ones the figure counts. The spec's figure is printed beside ours.

    PYTHONPATH=src .venv/bin/python bench/bench_chord_tables.py [--nodes 1000] [--seeds 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pubmesh.proto.chord.node import ChordNode
from pubmesh.proto.chord.routing import is_maintenance
from pubmesh.scenario.model import load_scenario
from pubmesh.sim.engine import Simulation

W1 = Path(__file__).resolve().parent.parent / "scenarios" / "chord_w1.toml"
#: docs/protocols/chord.md §11.8, N = 1,000: (mean, max) subscription conjunctions per edge
SPEC = {"simple": (323, 1584), "covering": (141, 514), "merging": (58, 172)}


def tables(nodes: int, routing: str, seed: int) -> tuple[float, int, float]:
    """Mean and max subscription conjunctions per edge of the warm W1 overlay, and the CPU
    seconds the warm start took."""
    overrides = [
        f"run.nodes={nodes}",
        f"run.seed={seed}",
        f"stack.chord.routing={routing}",
        "workload.publications=0",
    ]
    start = time.process_time()
    sim = Simulation(load_scenario(W1, overrides))
    sim.run(until=0.0)
    cpu = time.process_time() - start
    sizes = [
        sum(not is_maintenance(c) for c in node.out[v])
        for node in sim.nodes.values()
        if isinstance(node, ChordNode)
        for v in node.edges
    ]
    return statistics.fmean(sizes), max(sizes), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1..K")
    args = parser.parse_args()
    table = Table(title=f"W1 conjunctions per edge, N = {args.nodes:,}")
    for column in ("routing", "seed", "mean", "max", "spec mean/max (N=1000)", "CPU s"):
        table.add_column(column, justify="right")
    for routing, (spec_mean, spec_max) in SPEC.items():
        for seed in range(1, args.seeds + 1):
            mean, top, cpu = tables(args.nodes, routing, seed)
            spec = f"{spec_mean}/{spec_max}"
            table.add_row(routing, str(seed), f"{mean:.1f}", str(top), spec, f"{cpu:.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
