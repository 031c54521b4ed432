"""Benchmarks for the ``clique`` and ``d2g`` stacks (Scheideler's lecture;
docs/protocols/relay.md §9).

* **Clique convergence against n**, through the analysis pipeline: for each corruption kind of
  spec §6 and n in --sizes, one simulation per seed (a subprocess of ``pubmesh sim``) of
  ``scenarios/clique_corrupted.toml`` that runs until the spec's bound 6·n ln n + 50 rounds;
  one ``pubmesh analyze`` job (Spark) over all the runs gives ``convergence_time`` (the first
  snapshot from which the legitimacy predicate holds for good; snapshots every 5T). Rounds are
  counted from the corruption; the fitted constant a of rounds = a·n ln n is printed per kind,
  and the log-log plot goes to OUT/convergence.png.
* **d2g shape against n**: ``scenarios/d2g_corrupted.toml`` from ``random_graph`` for
  40√n + 300 rounds (the C6 run of tests/proto/d2g/test_d2g_figures.py): m/√(n ln n),
  max |N|/√n, the strongly connected share and the far-pair fraction over the snapshots after
  300 rounds.
* **Work once legitimate**: messages per member per round on a warm group (C2's figure for
  the clique, 5 − 6/n by count; the same for d2g), 200 rounds.

    .venv/bin/python bench/bench_relay.py --out out/bench/relay
    .venv/bin/python bench/bench_relay.py --sizes 8,16 --kinds junk --d2g-sizes 16   # quick
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "proto" / "d2g"))

T_CLIQUE = 0.25
CLIQUE_SCENARIO = ROOT / "scenarios" / "clique_corrupted.toml"


def bound(n: int) -> float:
    return 6 * n * math.log(n) + 50


def simulate_clique(kind: str, n: int, seed: int, out: Path) -> tuple[bool, float, Path]:
    """One clique run in a subprocess, to the spec's bound; (finished, CPU s, run dir)."""
    run_dir = out / "runs" / f"{kind}-{n}-s{seed}"
    duration = bound(n) * T_CLIQUE + 5.0
    command = [
        sys.executable, "-m", "pubmesh", "sim", str(CLIQUE_SCENARIO), "--quiet",
        "--seed", str(seed), "--out", str(run_dir), "--force",
        "--set", f"run.nodes={n}", "--set", f"init.corruption={kind}",
        "--set", f"init.junk_messages={n}", "--set", f"run.duration={duration}",
        "--set", "workload.publications=0",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.returncode == 0, cpu, run_dir


def clique_series(args: argparse.Namespace, out: Path, console: Any) -> list[dict[str, Any]]:
    from rich.progress import Progress
    from rich.table import Table

    from pubmesh.analysis.job import analyze
    from pubmesh.analysis.spark import get_session

    sizes = [int(x) for x in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    seeds = [int(x) for x in args.seeds.split(",")]
    runs: list[dict[str, Any]] = []
    with Progress(console=console) as progress:
        bar = progress.add_task("clique runs", total=len(sizes) * len(kinds) * len(seeds))
        for kind in kinds:
            for n in sizes:
                for seed in seeds:
                    progress.update(bar, description=f"clique {kind} n={n} seed {seed}")
                    started = time.perf_counter()
                    finished, cpu, run_dir = simulate_clique(kind, n, seed, out)
                    runs.append({"kind": kind, "n": n, "seed": seed, "finished": finished,
                                 "cpu_s": cpu, "wall_s": time.perf_counter() - started,
                                 "run_dir": run_dir})  # fmt: skip
                    progress.advance(bar)
    done = [r for r in runs if r["finished"]]
    spark = get_session()
    analysis = analyze(spark, [r["run_dir"] for r in done], out / "analysis")
    rows = {row["run_id"]: row for row in analysis.rows}
    ids = {s.root.name: s.run_ids[0] for s in analysis.sources}
    corrupted_at = 0.5  # start_spread + subscribe_at: the last start (scenario)
    for r in done:
        t = rows[ids[r["run_dir"].name]]["convergence_time"]
        r["rounds"] = None if t is None else max(0.0, (t - corrupted_at) / T_CLIQUE)
    table = Table(title="clique: rounds from a corrupted state to a clique (snapshots every 5T)")
    for column in ("kind", "n", "seeds", "rounds mean", "rounds max", "bound", "a = mean/(n ln n)"):
        table.add_column(column, justify="right")
    figures = []
    for kind in kinds:
        fits = []
        for n in sizes:
            got = [r for r in done if r["kind"] == kind and r["n"] == n]
            rounds = [r["rounds"] for r in got if r["rounds"] is not None]
            missing = len(got) - len(rounds)
            if not rounds:
                table.add_row(kind, str(n), str(len(got)), "–", "–", f"{bound(n):.0f}", "–")
                continue
            a = statistics.mean(rounds) / (n * math.log(n))
            fits.append(a)
            figures.append(
                {"kind": kind, "n": n, "rounds_mean": statistics.mean(rounds),
                 "rounds_max": max(rounds), "not_converged": missing, "a": a}
            )  # fmt: skip
            table.add_row(
                kind, str(n), f"{len(got)}" + (f" ({missing} not)" if missing else ""),
                f"{statistics.mean(rounds):.0f}", f"{max(rounds):.0f}", f"{bound(n):.0f}",
                f"{a:.2f}",
            )  # fmt: skip
    console.print(table)
    if figures:
        import pandas as pd
        from benchplots import loglog

        # a log axis has no 0: junk at small n never leaves legitimacy (rounds 0), not plotted
        frame = pd.DataFrame([f for f in figures if f["rounds_mean"] > 0])
        (out / "convergence.png").write_bytes(
            loglog(frame, "n", "rounds_mean", "kind", "clique: rounds to converge against n")
        )
    return figures


def d2g_series(args: argparse.Namespace, console: Any) -> list[dict[str, Any]]:
    from rich.table import Table
    from test_d2g_figures import run_c6

    table = Table(title="d2g from random_graph: shape after 300 rounds (40√n + 300 rounds)")
    for column in ("n", "seed", "m/√(n ln n)", "m/√n", "max |N|/√n", "strongly conn.",
                   "far pairs", "P[twin]", "birthday", "CPU s"):  # fmt: skip
        table.add_column(column, justify="right")
    figures = []
    for n in [int(x) for x in args.d2g_sizes.split(",")]:
        started = time.process_time()
        shape, _, _ = run_c6(n, 1)
        cpu = time.process_time() - started
        row = {
            "n": n,
            "m_over_sqrt_nlnn": shape.m / math.sqrt(n * math.log(n)),
            "m_over_sqrt_n": shape.m / math.sqrt(n),
            "max_over_sqrt_n": shape.largest / math.sqrt(n),
            "strongly_connected": sum(shape.connected) / len(shape.connected),
            "far": statistics.mean(shape.far),
            "twin": shape.twin_rate,
            "birthday": shape.birthday,
            "cpu_s": cpu,
        }
        figures.append(row)
        table.add_row(
            str(n), "1", f"{row['m_over_sqrt_nlnn']:.2f}", f"{row['m_over_sqrt_n']:.2f}",
            f"{row['max_over_sqrt_n']:.2f}", f"{row['strongly_connected']:.1%}",
            f"{row['far']:.2%}", f"{row['twin']:.2f}", f"{row['birthday']:.2f}", f"{cpu:.0f}",
        )  # fmt: skip
    console.print(table)
    return figures


def work_series(console: Any) -> list[dict[str, Any]]:
    from rich.table import Table

    from pubmesh.scenario.model import load_scenario
    from pubmesh.sim.engine import Simulation

    table = Table(title="messages per member per round once legitimate (warm group, 200 rounds)")
    for column in ("stack", "n", "messages/member/round", "clique's 5 − 6/n"):
        table.add_column(column, justify="right")
    figures = []
    for stack, scenario, timeout in (
        ("clique", "clique_corrupted.toml", 0.25),
        ("d2g", "d2g_corrupted.toml", 0.5),
    ):
        for n in (16, 64):
            sets = [f"run.nodes={n}", "init.corruption=none", "init.overlay=warm",
                    "workload.publications=0", "trace.snapshot_interval=0"]  # fmt: skip
            sim = Simulation(load_scenario(ROOT / "scenarios" / scenario, sets), None)
            sim.run(until=10 * timeout)
            before, start = sim.messages_sent, sim.now
            sim.run(until=start + 200 * timeout)
            work = (sim.messages_sent - before) / (n * 200)
            figures.append({"stack": stack, "n": n, "per_member_per_round": work})
            expected = f"{5 - 6 / n:.2f}" if stack == "clique" else "–"
            table.add_row(stack, str(n), f"{work:.2f}", expected)
    console.print(table)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/bench/relay")
    parser.add_argument("--sizes", default="8,16,32,64", help="clique group sizes")
    parser.add_argument(
        "--kinds", default="random_graph,line,cliques,indirect,sets,junk", help="corruptions"
    )
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--d2g-sizes", default="16,64,256")
    parser.add_argument("--skip-clique", action="store_true")
    parser.add_argument("--skip-d2g", action="store_true")
    args = parser.parse_args()
    from rich.console import Console

    console = Console()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    if not args.skip_clique:
        figures["clique"] = clique_series(args, out, console)
    if not args.skip_d2g:
        figures["d2g"] = d2g_series(args, console)
    figures["work"] = work_series(console)
    (out / "figures.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    console.print(f"figures: {out / 'figures.json'}  plot: {out / 'convergence.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
