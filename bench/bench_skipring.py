"""Benchmark: skipring convergence from corrupted states as n grows, and its cost
once legitimate, measured through the analysis pipeline.

For each corruption kind and n = 64, 256, 1,024, 4,096, 16,384 subscribers, one simulation
(a subprocess of ``pubmesh sim`` under an RLIMIT_CPU of --cpu-limit seconds) starts from that
corrupted state with 1,000 junk messages in flight and runs for three round-robin sweeps of the
supervisor plus 30 s. A kind stops growing n at its first run that hits the CPU limit; that
run stops where it is and keeps its trace, and the table says how far it got. Then
one ``pubmesh analyze`` job (Spark) over all the runs gives ``convergence_time`` (the first
snapshot from which the legitimacy predicate holds for good; snapshots every timeout interval,
so it is in rounds), and a Spark query over the runs' per-second message counts gives the
messages per round sent by the supervisor and by an average subscriber after convergence.
The log-log plot of rounds against n goes to OUT/convergence.png, the figures to
OUT/figures.json.

    .venv/bin/python bench/bench_skipring.py --out out/bench/skipring
    .venv/bin/python bench/bench_skipring.py --sizes 64,256 --kinds junk   # a quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCENARIO = """
[run]
stack = "skipring"
nodes = {nodes}
seed = {seed}
duration = {duration}
start_spread = 1.0
[network]
latency = {{ dist = "uniform", min = 0.002, max = 0.02 }}
detection_delay = 0.5
[workload]
topics = 1
subscriptions_per_node = 1
publications = 0
[init]
corruption = "{kind}"
junk_messages = 1000
[trace]
messages = "counts"
snapshot_interval = {interval}
[stack.skipring]
timeout_interval = {interval}
supervisor_interval = {supervisor}
"""
TIMEOUT_INTERVAL = 1.0
SUPERVISOR_INTERVAL = 0.01
DEFAULT_KINDS = "random_graph,db_all,components,junk"
DEFAULT_SIZES = "64,256,1024,4096,16384"


def duration_of(n: int) -> float:
    """A run's simulated seconds: three round-robin sweeps of the supervisor, plus 30 s."""
    return 3 * n * SUPERVISOR_INTERVAL + 30


def limit_cell(result: dict[str, Any]) -> str:
    """The table's cell for a run the CPU limit stopped: how far it got, if known."""
    reached = result["reached"]
    if reached is None:
        return "CPU limit"
    return f"CPU limit at t = {reached:.0f} of {duration_of(result['n']):.0f} s"


def simulate(
    kind: str, n: int, seed: int, out: Path, cpu_limit: float, reuse: bool = False
) -> tuple[bool, float, Path, float | None]:
    """One run in a subprocess under RLIMIT_CPU; (finished, CPU seconds, run dir, simulated
    seconds reached by a run the limit stopped). At the soft limit ``pubmesh sim`` stops
    between two events and writes its trace so far (SIGXCPU); the hard limit, well after it,
    leaves time for that."""
    duration = duration_of(n)
    scenario = out / "scenarios" / f"{kind}-{n}.toml"
    scenario.parent.mkdir(parents=True, exist_ok=True)
    scenario.write_text(
        SCENARIO.format(
            nodes=n + 1, seed=seed, duration=duration, kind=kind,
            interval=TIMEOUT_INTERVAL, supervisor=SUPERVISOR_INTERVAL,
        )
    )  # fmt: skip
    run_dir = out / "runs" / f"{kind}-{n}"
    limit = int(cpu_limit)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 600))

    record = run_dir / "bench.json"
    if reuse and record.exists():
        saved = json.loads(record.read_text())
        return bool(saved["finished"]), float(saved["cpu_s"]), run_dir, saved.get("reached")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # --force: a run of an earlier bench (without --reuse) is replaced
    command = [sys.executable, "-m", "pubmesh", "sim", str(scenario), "--quiet", "--force"]
    done = subprocess.run(
        [*command, "--out", str(run_dir)],
        capture_output=True,
        text=True,
        preexec_fn=cap,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    reached = None
    if done.returncode == 128 + signal.SIGXCPU:  # stopped at the limit, its trace kept
        reached = float(json.loads((run_dir / "run.json").read_text())["simulated_seconds"])
    finished = done.returncode == 0
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"finished": finished, "cpu_s": cpu, "reached": reached}) + "\n")
    return finished, cpu, run_dir, reached


def per_round_costs(spark: Any, runs: list[Path], convergence: dict[str, float]) -> dict[str, Any]:
    """Messages sent per round after convergence: by the supervisor (node 0) and per
    subscriber, from the runs' per-second message counts (one Spark query)."""
    from pyspark.sql import functions as F

    from pubmesh.analysis.load import inspect, load

    trace = load(spark, [inspect(r) for r in runs])
    since = spark.createDataFrame(list(convergence.items()), "run_id string, t0 double")
    counts = trace.message_counts.join(since, ["run_id"]).where(F.col("second") >= F.col("t0"))
    span = trace.runs.select("run_id", "duration", "nodes")
    rows = (
        counts.groupBy("run_id")
        .agg(
            F.sum(F.when(F.col("node") == 0, F.col("sent")).otherwise(0)).alias("supervisor"),
            F.sum(F.when(F.col("node") != 0, F.col("sent")).otherwise(0)).alias("subscribers"),
        )
        .join(span, ["run_id"])
        .join(since, ["run_id"])
        .collect()
    )
    out = {}
    for row in rows:
        rounds = (row["duration"] - row["t0"]) / TIMEOUT_INTERVAL
        out[row["run_id"]] = {
            "supervisor_per_round": row["supervisor"] / rounds,
            "per_subscriber_per_round": row["subscribers"] / rounds / (row["nodes"] - 1),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/bench/skipring")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="subscriber counts")
    parser.add_argument("--kinds", default=DEFAULT_KINDS, help="corruption kinds")
    parser.add_argument("--cpu-limit", type=float, default=200.0, help="CPU seconds per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--reuse", action="store_true", help="keep runs already simulated into --out"
    )
    args = parser.parse_args()

    import pandas as pd
    from benchplots import loglog
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from pubmesh.analysis.job import analyze
    from pubmesh.analysis.spark import get_session

    console = Console()
    out = Path(args.out).resolve()
    sizes = [int(x) for x in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    results: list[dict[str, Any]] = []
    with Progress(console=console) as progress:
        bar = progress.add_task("simulating", total=len(sizes) * len(kinds))
        for kind in kinds:
            for n in sizes:
                progress.update(bar, description=f"{kind} n={n:,}")
                started = time.perf_counter()
                finished, cpu, run_dir, reached = simulate(
                    kind, n, args.seed, out, args.cpu_limit, args.reuse
                )
                wall = time.perf_counter() - started
                results.append({"kind": kind, "n": n, "finished": finished, "cpu_s": cpu,
                                "wall_s": wall, "run_dir": run_dir,
                                "reached": reached})  # fmt: skip
                progress.advance(bar)
                if not finished:
                    console.print(
                        f"{kind}: n={n:,} hit the {args.cpu_limit:.0f} CPU s limit ({cpu:.0f} s:"
                        f" {limit_cell(results[-1])}); larger n not run for this kind"
                    )
                    progress.advance(bar, len(sizes) - sizes.index(n) - 1)
                    break
    done = [r for r in results if r["finished"]]
    spark = get_session()
    analysis = analyze(spark, [r["run_dir"] for r in done], out / "analysis")
    rows_by_id = {row["run_id"]: row for row in analysis.rows}
    ids = {s.root.name: s.run_ids[0] for s in analysis.sources}
    convergence = {
        ids[r["run_dir"].name]: rows_by_id[ids[r["run_dir"].name]]["convergence_time"]
        for r in done
        if rows_by_id[ids[r["run_dir"].name]]["convergence_time"] is not None
    }
    costs = per_round_costs(spark, [r["run_dir"] for r in done], convergence)
    table = Table(title="skipring: convergence from corrupted states, cost once legitimate")
    for column in ("kind", "n", "rounds to converge", "CPU s", "supervisor msgs/round",
                   "msgs/subscriber/round", "config req/round"):  # fmt: skip
        table.add_column(column, justify="right")
    figures = []
    for r in results:
        row: dict[str, Any] = {"kind": r["kind"], "n": r["n"], "cpu_s": round(r["cpu_s"], 1),
                               "finished": r["finished"], "reached_s": r["reached"],
                               "duration_s": duration_of(r["n"])}  # fmt: skip
        if r["finished"]:
            run_id = ids[r["run_dir"].name]
            metrics = rows_by_id[run_id]
            t = metrics["convergence_time"]
            row["rounds"] = None if t is None else t / TIMEOUT_INTERVAL
            row["config_requests"] = metrics["config_requests"]
            row.update(costs.get(run_id, {}))
        figures.append(row)

        def cell(key: str, fmt: str, data: dict[str, Any] = row) -> str:
            value = data.get(key)
            return "–" if value is None else fmt.format(value)

        table.add_row(
            r["kind"], f"{r['n']:,}",
            cell("rounds", "{:.0f}") if r["finished"] else limit_cell(r),
            f"{r['cpu_s']:.0f}", cell("supervisor_per_round", "{:.1f}"),
            cell("per_subscriber_per_round", "{:.2f}"), cell("config_requests", "{:.2f}"),
        )  # fmt: skip
    console.print(table)
    converged = pd.DataFrame([f for f in figures if f.get("rounds") is not None])
    if len(converged):
        (out / "convergence.png").write_bytes(
            loglog(converged, "n", "rounds", "kind", "skipring: rounds to converge against n")
        )
    (out / "figures.json").write_text(json.dumps(figures, indent=2, default=str) + "\n")
    console.print(f"figures: {out / 'figures.json'}  plot: {out / 'convergence.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
