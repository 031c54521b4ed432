"""brokertree benchmarks: the SRDS'11 anchor and the failure curve.

* **Anchor** (Kazemzadeh & Jacobsen, SRDS'11): 500 brokers, δ = 3, 97% of publications
  delivered with up to 17% of the brokers failed. ``scenarios/brokertree_srds11.toml``: 500
  brokers + 500 clients, 17% of the brokers (85) crash at 40 s; reliability over the pairs
  published after every subscription was confirmed, printed beside 97%.
* **Curve**: reliability against the share of brokers crashed for δ = 1, 2, 3 on the base
  scenario (``scenarios/brokertree_fail.toml``), with duplicates, order violations and stalls.
  The same grid runs through Spark with ``pubmesh sweep scenarios/grids/brokertree_failures.toml``.

Run: ``python bench/bench_brokertree.py [--seeds 1,2] [--skip-anchor] [--skip-curve]``.
Figures go into BENCHMARKS.md with the machine and the date.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "proto" / "brokertree"))

from pubmesh.scenario.model import load_scenario  # noqa: E402
from pubmesh.sim.engine import Simulation  # noqa: E402
from support.btfigures import BrokerFigures, measure  # noqa: E402


def simulate(
    scenario_file: str, sets: list[str], *, confirmed: bool = False
) -> tuple[Simulation, BrokerFigures, float]:
    """Run the scenario with ``sets`` in a scratch directory: the simulation, its figures over
    the pairs published from ``publish_start`` on, and the CPU seconds the run took."""
    scenario = load_scenario(ROOT / scenario_file, sets)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.process_time()
        sim = Simulation(scenario, Path(tmp) / "run")
        sim.run()
        sim.close()
        cpu = time.process_time() - started
        figures = measure(
            sim, Path(tmp) / "run", since=scenario.workload.publish_start, confirmed=confirmed
        )
    return sim, figures, cpu


def run(scenario_file: str, sets: list[str]) -> tuple[dict[str, float], float]:
    sim, figures, cpu = simulate(scenario_file, sets)
    scenario = sim.scenario
    crashed = sum(1 for n in sim.crashed if n < scenario.stack_params.brokers)
    return {
        "reliability": figures.reliability,
        "expected": figures.expected,
        "duplicates": figures.duplicates,
        "order": figures.order_violations,
        "wrong": figures.wrong,
        "stalls": figures.events["brokertree.stalled"],
        "skipped": figures.events["brokertree.stall_skipped"],
        "tagged": figures.events["brokertree.tagged"],
        "partial": figures.partial,
        "crashed": crashed,
        "confirmed_by": figures.confirmed_by,
    }, cpu


def claims(span: str, console: Console) -> None:
    """spec §11 (a) over many seeds, as tests/proto/brokertree/test_brokertree_figures.py runs
    it on three."""
    from test_brokertree_figures import CUT, _nodes, _victims

    first, _, last = span.partition("-")
    table = Table(title=f"spec §11 (a): δ = 3 brokers crashed at 40 s, seeds {span}")
    for column in ("victims", "runs", "reliability min", "mean", "runs < 1", "dups", "order",
                   "wrong", "stalls", "CPU s"):  # fmt: skip
        table.add_column(column, justify="right")
    for how in ("adjacent", "random", "busy"):
        rows = []
        for seed in range(int(first), int(last) + 1):
            victims = _victims(how, seed, 3)
            sets = [*CUT, _nodes(victims), f"run.seed={seed}"]
            sets.append(f"stack.brokertree.topology_seed={seed}")
            rows.append(run("scenarios/brokertree_base.toml", sets))
        values = [got["reliability"] for got, _ in rows]
        table.add_row(
            how, str(len(rows)), f"{min(values):.4f}", f"{sum(values) / len(values):.4f}",
            str(sum(1 for v in values if v < 1.0)),
            str(sum(got["duplicates"] for got, _ in rows)),
            str(sum(got["order"] for got, _ in rows)),
            str(sum(got["wrong"] for got, _ in rows)),
            str(sum(got["stalls"] for got, _ in rows)),
            f"{sum(cpu for _, cpu in rows):.0f}",
        )  # fmt: skip
        console.print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2", help="seeds, comma-separated")
    parser.add_argument("--skip-anchor", action="store_true")
    parser.add_argument("--skip-curve", action="store_true")
    parser.add_argument(
        "--claims",
        metavar="FIRST-LAST",
        help="also run spec §11 (a) (δ = 3 brokers crashed: adjacent, random, busy) over "
        "this range of seeds, e.g. 1-50, and count the runs that lose, duplicate or reorder",
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    console = Console(width=140)
    if args.claims:
        claims(args.claims, console)
    if not args.skip_anchor:
        table = Table(title="SRDS'11 anchor: 500 brokers + 500 clients, δ = 3, 17% crashed")
        for column in ("stall_timeout", "seed", "crashed", "reliability", "SRDS'11", "dups",
                       "order", "wrong", "stalls", "skipped", "CPU s"):  # fmt: skip
            table.add_column(column, justify="right")
        for timeout in (0.0, 5.0):  # the spec's rule (§4), and ours
            for seed in seeds:
                sets = [
                    f"run.seed={seed}",
                    f"stack.brokertree.topology_seed={seed}",
                    f"stack.brokertree.stall_timeout={timeout}",
                ]
                got, cpu = run("scenarios/brokertree_srds11.toml", sets)
                table.add_row(
                    f"{timeout:g}", str(seed), str(got["crashed"]), f"{got['reliability']:.4f}",
                    "0.97", str(got["duplicates"]), str(got["order"]), str(got["wrong"]),
                    str(got["stalls"]), str(got["skipped"]), f"{cpu:.0f}",
                )  # fmt: skip
        console.print(table)
    if not args.skip_curve:
        table = Table(title="Reliability against brokers crashed (20 brokers, 66 clients)")
        for column in ("δ", "fraction", "crashed", "seed", "reliability", "dups", "order",
                       "stalls", "tagged", "CPU s"):  # fmt: skip
            table.add_column(column, justify="right")
        for delta in (1, 2, 3):
            for fraction in (0.0, 0.1, 0.17, 0.25, 0.35, 0.5):
                for seed in seeds:
                    sets = [
                        f"run.seed={seed}",
                        f"stack.brokertree.topology_seed={seed}",
                        f"stack.brokertree.delta={delta}",
                        f"faults.0.fraction={fraction}",
                    ]
                    got, cpu = run("scenarios/brokertree_fail.toml", sets)
                    table.add_row(
                        str(delta), f"{fraction:.2f}", str(got["crashed"]), str(seed),
                        f"{got['reliability']:.4f}", str(got["duplicates"]), str(got["order"]),
                        str(got["stalls"]), str(got["tagged"]), f"{cpu:.1f}",
                    )  # fmt: skip
        console.print(table)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    console.print(f"peak memory {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
