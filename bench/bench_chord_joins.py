"""Chord overlays built by protocol joins from scratch, at sizes the test suite cannot afford.

tests/proto/chord/test_chord_rules.py checks that up to 20 nodes joining at once through the
contact reach Q (docs/protocols/chord.md §11 test 1, §7). This script builds larger rings the
way a deployment would: ``scenarios/chord_broadcast.toml`` (one topic, every node subscribed) with
``init.overlay = "joined"``, node starts drawn uniformly over ``N × --gap`` simulated seconds (every
node joins through the contact, Terpstra et al. §4.5, spec §7), no publications. After the last
start it runs the protocol in one-second steps and checks Q
(:func:`pubmesh.proto.chord.legitimacy.violations`) after each, up to ``--limit`` seconds. The
figures are the simulated seconds from the last start to Q, the messages per join and the CPU
seconds. It exits 1 if Q does not hold within the limit, printing the violations and the command
that replays the case. N = 1,000 is not the default: its CPU cost grows about as N^2.2 (~6,800 CPU s
since the union filters share their prefixes; BENCHMARKS.md).

    PYTHONPATH=src .venv/bin/python bench/bench_chord_joins.py [--sizes 100,200] [--gap 1.0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import NamedTuple

from rich.console import Console
from rich.table import Table

from pubmesh.proto.chord.legitimacy import violations
from pubmesh.scenario.model import load_scenario
from pubmesh.sim.engine import Simulation

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "chord_broadcast.toml"


class Outcome(NamedTuple):
    spread: float  # simulated seconds over which the nodes start
    to_q: float | None  # simulated seconds from the last start to Q (None: not within limit)
    messages: int
    cpu: float
    left: list[str]  # Q's violations at the end (empty when Q held)


def measure(n: int, seed: int, gap: float, limit: float) -> Outcome:
    start = time.process_time()
    spread = n * gap
    scenario = load_scenario(
        SCENARIO,
        [
            f"run.nodes={n}",
            f"run.seed={seed}",
            f"run.start_spread={spread}",
            f"run.duration={spread + limit}",
            'init.overlay="joined"',
            "workload.publications=0",
        ],
    )
    sim = Simulation(scenario)
    sim.run(until=spread)
    left = ["not run"]
    t = spread
    while t < spread + limit:
        t += 1.0
        sim.run(until=t)
        left = violations(sim.nodes)
        if not left:
            break
    to_q = t - spread if not left else None
    return Outcome(spread, to_q, sim.messages_sent, time.process_time() - start, left)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,200", help="comma-separated N (default 100,200)")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    parser.add_argument(
        "--gap", type=float, default=1.0, help="mean simulated seconds between starts (default 1)"
    )
    parser.add_argument(
        "--limit", type=float, default=120.0, help="simulated seconds allowed after the last start"
    )
    args = parser.parse_args()
    console = Console(width=120)
    table = Table(title=f"chord joins from scratch, one start per {args.gap:g} s on average")
    for column in ("N", "seed", "starts over s", "last start → Q, s", "messages / join", "CPU s"):
        table.add_column(column, justify="right")
    failed = False
    for n in (int(x) for x in args.sizes.split(",")):
        for seed in (int(x) for x in args.seeds.split(",")):
            out = measure(n, seed, args.gap, args.limit)
            to_q = f"{out.to_q:.0f}" if out.to_q is not None else f"> {args.limit:.0f}"
            table.add_row(
                str(n),
                str(seed),
                f"{out.spread:.0f}",
                to_q,
                f"{out.messages / n:,.0f}",
                f"{out.cpu:.1f}",
            )
            if out.left:
                failed = True
                console.print(f"[red]N={n} seed {seed}: Q does not hold:[/red]")
                for line in out.left:
                    console.print(f"  {line}")
                console.print(
                    f"  replay: PYTHONPATH=src .venv/bin/python bench/bench_chord_joins.py "
                    f"--sizes {n} --seeds {seed} --gap {args.gap:g} --limit {args.limit:g}"
                )
    console.print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
