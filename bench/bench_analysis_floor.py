"""Benchmark: the floor under Spark ÷ DuckDB for the core metrics.

``bench_analysis.py`` times the core metrics on Spark and on DuckDB. This one asks how low the
Spark ÷ DuckDB ratio can go on this machine whatever the plan: it times, on the same cached
synthetic trace and in the same run, the steps that every plan for those metrics has to take,
each written as the smallest query that takes it, in both engines:

* ``messages by node``: one scan of the message rows, counted per sending node (the per-node
  metrics need every message aggregated by node at least once);
* ``first deliveries``: the deliveries aggregated per (publication, node), earliest time and
  copies (every per-publication metric is over first deliveries), summed so nothing is collected;
* ``per publication``: the deliveries joined to their publications and aggregated per
  publication (count, max latency), collected: the smallest per-publication result.

The first two read disjoint inputs (messages, deliveries), so a plan for the core metrics does
at least the work of both: their Spark times added, divided by DuckDB's time for *all* the core
metrics, is a floor under the ratio ``bench_analysis.py`` measures. Each step is timed warm
(after one untimed run), the best of ``--repeat`` runs, which favours both engines alike.
Beside them, ``spark.range(1).count()``: what one Spark job costs with nothing to do.

The cold goal (≤ 5× DuckDB including session start) has a floor of its own: a fresh process
that imports pyspark, starts the session and runs that empty job, against a fresh process
that computes *all* the core metrics on DuckDB (``bench_analysis.cold_duckdb``), best of
``--repeat`` each.

    .venv/bin/python bench/bench_analysis_floor.py                        # 20M messages
    .venv/bin/python bench/bench_analysis_floor.py --messages 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analysis import (
    cold_duckdb,
    duckdb_metrics,
    fresh_process_seconds,
    machine,
    row_count,
    spark_metrics,
    trace_arguments,
    trace_of,
)

DUCK_STEPS = {
    "messages by node": "SELECT src, count(*) FROM read_parquet('{run}/messages/*.parquet') "
    "GROUP BY src",
    "first deliveries": "SELECT sum(t), sum(c) FROM (SELECT pub_id, node, min(t) AS t, "
    "count(*) AS c FROM read_parquet('{run}/deliveries/*.parquet') GROUP BY pub_id, node)",
    "per publication": "SELECT d.pub_id, count(*), max(d.t - p.t) "
    "FROM read_parquet('{run}/deliveries/*.parquet') d "
    "JOIN read_parquet('{run}/publications/*.parquet') p USING (pub_id) GROUP BY d.pub_id",
}


def spark_steps(spark: Any, run: Path) -> dict[str, Callable[[], Any]]:
    from pyspark.sql import functions as F

    def table(name: str) -> Any:
        return spark.read.parquet(str(run / name))

    def messages_by_node() -> Any:
        return table("messages").groupBy("src").count().collect()

    def first() -> Any:
        return (
            table("deliveries")
            .groupBy("pub_id", "node")
            .agg(F.min("t").alias("t"), F.count("*").alias("c"))
            .agg(F.sum("t"), F.sum("c"))
            .collect()
        )

    def per_publication() -> Any:
        pubs = table("publications").select("pub_id", F.col("t").alias("t_pub"))
        return (
            table("deliveries")
            .join(pubs, "pub_id")
            .groupBy("pub_id")
            .agg(F.count("*"), F.max(F.col("t") - F.col("t_pub")))
            .collect()
        )

    return {
        "messages by node": messages_by_node,
        "first deliveries": first,
        "per publication": per_publication,
    }


def cold_empty_job() -> float:
    """A fresh process: imports, JVM and session start, one empty job (wall s)."""
    return fresh_process_seconds(
        "import time; t = time.perf_counter()\n"
        "from pubmesh.analysis.spark import get_session\n"
        "get_session().range(1).count()\n"
        "print(time.perf_counter() - t)\n"
    )


def best(action: Callable[[], Any], repeat: int) -> float:
    action()  # warm-up: JIT, file listings, the OS page cache
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    trace_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per step (best kept)")
    args = parser.parse_args()

    import duckdb
    from rich.console import Console
    from rich.table import Table

    from pubmesh.analysis.spark import get_session

    console = Console()
    run = trace_of(console, args)
    threads = os.cpu_count() or 2
    db = duckdb.connect()
    db.execute(f"SET threads = {threads}")
    with console.status("Spark session…"):
        spark = get_session()
    steps: dict[str, dict[str, float]] = {}
    spark_actions = spark_steps(spark, run)
    for name, sql in DUCK_STEPS.items():
        with console.status(f"{name}…"):
            query = sql.format(run=run)
            steps[name] = {
                "spark_s": best(spark_actions[name], args.repeat),
                "duckdb_s": best(lambda q=query: db.execute(q).fetchall(), args.repeat),
            }
    with console.status("an empty Spark job; the core metrics in both engines…"):
        empty_job = best(lambda: spark.range(1).count(), args.repeat)
        spark_all = best(lambda: spark_metrics(spark, run), 1)
        duck_all = best(lambda: duckdb_metrics(run, threads), args.repeat)

    with console.status("cold: a fresh Spark session's empty job; DuckDB's core metrics…"):
        cold_empty = min(cold_empty_job() for _ in range(args.repeat))
        cold_duck = min(cold_duckdb(run, threads) for _ in range(args.repeat))

    floor = steps["messages by node"]["spark_s"] + steps["first deliveries"]["spark_s"]
    table = Table(
        title=f"Spark (local[*]) ÷ DuckDB, step by step, warm, best of {args.repeat} — {machine()}"
    )
    for column in ("step", "Spark s", "DuckDB s", "Spark ÷ DuckDB"):
        table.add_column(column, justify="right")
    for name, figures in steps.items():
        table.add_row(
            name,
            f"{figures['spark_s']:.2f}",
            f"{figures['duckdb_s']:.3f}",
            f"{figures['spark_s'] / figures['duckdb_s']:.1f}",
        )
    table.add_row("empty job", f"{empty_job:.3f}", "", "")
    table.add_row("all core metrics", f"{spark_all:.2f}", f"{duck_all:.3f}",
                  f"{spark_all / duck_all:.1f}")  # fmt: skip
    console.print(table)
    rows = {t: row_count(run, t) for t in ("messages", "deliveries", "publications")}
    console.print(
        "rows: " + ", ".join(f"{k} {v:,}" for k, v in rows.items())
        + f"\nfloor: messages by node + first deliveries on Spark = {floor:.2f} s, "
        f"{floor / duck_all:.1f}× DuckDB's time for all the core metrics "
        f"(goal ≤ 3×: {'reachable' if floor / duck_all <= 3 else 'below the floor'})"
        f"\ncold floor: a fresh process's Spark session and empty job = {cold_empty:.2f} s, "
        f"{cold_empty / cold_duck:.1f}× a fresh process's DuckDB core metrics ({cold_duck:.2f} s)"
        f" (goal ≤ 5×: {'reachable' if cold_empty / cold_duck <= 5 else 'below the floor'})"
    )  # fmt: skip
    if args.json:
        figures_out = {
            "machine": machine(), "rows": rows, "threads": threads, "repeat": args.repeat,
            "steps": steps, "spark_empty_job_s": empty_job, "spark_all_s": spark_all,
            "duckdb_all_s": duck_all, "floor_s": floor, "floor_ratio": floor / duck_all,
            "cold_spark_empty_job_s": cold_empty, "cold_duckdb_all_s": cold_duck,
            "cold_floor_ratio": cold_empty / cold_duck,
        }  # fmt: skip
        Path(args.json).write_text(json.dumps(figures_out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
