"""Chord's quiet predicate Q over more seeds and sizes than the test suite affords
(docs/protocols/chord.md §11 test 1).

tests/proto/chord/test_chord_rules.py checks Q on warm overlays of N ∈ {1, 2, 8, 100, 1000}
(even and hashed keys, seed 1) and after joins of up to 20 nodes; at N = 1,000 the warm start costs
~30 CPU s (it reduces the union filter of every edge and clipped range, sharing prefixes), so
more seeds at that size are this benchmark. It runs the same check at the sizes and seeds
given: a warm overlay (every node on one
of three topics), Q (:func:`pubmesh.proto.chord.legitimacy.violations`) at once and after 30
quiet seconds of protocol (stabilize, fix_fingers, filter refresh). It exits 1 if Q fails
anywhere, printing the violations and the command that replays the case.

    PYTHONPATH=src .venv/bin/python bench/bench_chord_q.py [--sizes 1000] [--seeds 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import NamedTuple

from rich.console import Console
from rich.table import Table

from pubmesh.harness import PoolCluster
from pubmesh.proto.chord.legitimacy import violations
from pubmesh.proto.chord.params import ChordParams
from pubmesh.proto.chord.warm import warm_start
from pubmesh.proto.core import Subscribe
from pubmesh.stacks.base import get_stack


class Outcome(NamedTuple):
    warm: float  # CPU s of the warm start
    total: float  # CPU s in all
    at_once: list[str]  # Q's violations at t = 0
    after: list[str]  # and after 30 quiet seconds


def measure(n: int, keys: str, seed: int) -> Outcome:
    start = time.process_time()
    params = ChordParams(even_keys=n if keys == "even" else 0)
    cluster = PoolCluster(get_stack("chord"), n, seed, params=params, step_limit=10**9)
    for node in cluster.peers:
        cluster.command(node, Subscribe(f"t{node % 3}"))
    cluster.pool.clear()
    warm_start({x: cluster.nodes[x] for x in cluster.live}, random.Random(seed), cluster.params)
    warm = time.process_time() - start
    at_once = violations({x: cluster.nodes[x] for x in cluster.live})
    cluster.quiesce(30.0)
    after = violations({x: cluster.nodes[x] for x in cluster.live})
    return Outcome(warm, time.process_time() - start, at_once, after)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000", help="comma-separated N (default 1000)")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    args = parser.parse_args()
    console = Console(width=120)
    table = Table(title="chord: Q on warm overlays (spec §11 test 1)")
    for column in ("N", "keys", "seed", "Q at t = 0", "Q after 30 s", "warm CPU s", "CPU s"):
        table.add_column(column, justify="right")
    failed = False
    for n in (int(x) for x in args.sizes.split(",")):
        for keys in ("even", "hashed"):
            for seed in (int(x) for x in args.seeds.split(",")):
                got = measure(n, keys, seed)
                ok = [not got.at_once, not got.after]
                table.add_row(
                    f"{n:,}", keys, str(seed), *("holds" if x else "FAILS" for x in ok),
                    f"{got.warm:.1f}", f"{got.total:.1f}",
                )  # fmt: skip
                if not all(ok):
                    failed = True
                    shown = [*got.at_once, *got.after][:5]
                    console.print(
                        f"[red]Q fails[/] N={n} {keys} seed {seed}: {'; '.join(shown)}\n"
                        f"  replay: PYTHONPATH=src .venv/bin/python bench/bench_chord_q.py "
                        f"--sizes {n} --seeds {seed}"
                    )
    console.print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
