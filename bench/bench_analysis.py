"""Benchmark: `pubmesh analyze`'s core metrics on Spark against the same metrics in
DuckDB SQL, on one synthetic trace of 20 million message rows and 20,000 publications.

The trace is generated deterministically with numpy (seed 7) as a trace v1 run directory and
cached under OUT/trace-<parameters>. Core metrics: per publication (expected, delivered,
receivers, duplicates, latency p50/p95/p99/max, hops mean, LDH, payload messages, RMR) and per
node (sent, received, load, control messages, deliveries), with the expected pairs decided by
the interval joins of :mod:`pubmesh.analysis.metrics`.

* Spark: the pipeline's own functions (``pubmesh.analysis.metrics``), composed as
  ``pubmesh analyze`` composes them (the first deliveries computed once and kept), local[*],
  results collected to the driver. *Cold* is a fresh process including the JVM and session start;
  *warm* is the second run in one session.
* DuckDB: the same metrics written as SQL over the same Parquet files, same thread count.

The two results are compared row by row (counts exactly, floats to 1e-9 relative); the
benchmark fails if they differ. Goal: Spark ÷ DuckDB ≤ 3 warm.

    .venv/bin/python bench/bench_analysis.py                  # 20M messages
    .venv/bin/python bench/bench_analysis.py --messages 1000000   # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pubmesh.trace.schema import SCHEMAS

RUN = "bench"
NODES = 2000
TOPICS = 50
SUBS_PER_NODE = 2
DURATION = 1000.0
#: message rows generated (and held in memory) at a time, and Parquet's row group size
MESSAGE_CHUNK = 5_000_000
ROW_GROUP = 1_000_000
#: bumped when the generator's output changes (the cached traces are keyed by it)
GENERATOR = 2


# --------------------------------------------------------------------------------------------
# The synthetic trace
# --------------------------------------------------------------------------------------------
def _table(table: str, columns: dict[str, Any], n: int) -> pa.Table:
    """Table ``table`` of ``n`` rows: ``columns`` (arrays, or values converted to the schema's
    types), ``run_id`` the benchmark's run, every other column null."""
    schema = SCHEMAS[table]
    columns = {"run_id": pa.array(np.full(n, RUN, dtype=object), pa.string()), **columns}
    arrays = [
        columns[f.name] if isinstance(columns.get(f.name), pa.Array)
        else pa.array(columns[f.name], type=f.type) if f.name in columns
        else pa.nulls(n, type=f.type)
        for f in schema
    ]  # fmt: skip
    return pa.Table.from_arrays(arrays, schema=schema)


def _write(run: Path, table: str, columns: dict[str, Any]) -> None:
    n = len(next(iter(columns.values()))) if columns else 0
    (run / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(
        _table(table, columns, n),
        run / table / "part-00000.parquet",
        compression="zstd",
        row_group_size=ROW_GROUP,
    )


def generate(run: Path, messages: int, publications: int) -> None:
    rng = np.random.default_rng(7)
    _write(run, "runs", {
        "stack": ["gossip"], "runtime": ["sim"], "nodes": [NODES], "seed": [7],
        "scenario": [""], "schema_version": [1], "duration": [DURATION],
        "messages_mode": ["full"],
    })  # fmt: skip
    # every node up at 0; 5% crash at 500 (they are then not expected for later publications)
    crashed = rng.choice(NODES, NODES // 20, replace=False)
    _write(run, "nodes", {
        "node": np.concatenate([np.arange(NODES), crashed]),
        "t": np.concatenate([np.zeros(NODES), np.full(len(crashed), 500.0)]),
        "event": ["up"] * NODES + ["crash"] * len(crashed),
        "role": ["peer"] * (NODES + len(crashed)),
    })  # fmt: skip
    sub_nodes = np.repeat(np.arange(NODES), SUBS_PER_NODE)
    sub_topics = np.concatenate(
        [rng.choice(TOPICS, SUBS_PER_NODE, replace=False) for _ in range(NODES)]
    )
    t_start = rng.uniform(0, 400, len(sub_nodes)).round(3)
    t_end = np.where(np.isin(sub_nodes, crashed), 500.0, np.nan)
    _write(run, "subscriptions", {
        "node": sub_nodes, "topic": [f"t{x}" for x in sub_topics], "t_start": t_start,
        "t_end": [None if math.isnan(x) else x for x in t_end],
    })  # fmt: skip
    pub_t = np.sort(rng.uniform(100, 900, publications)).round(4)
    pub_topic = rng.integers(0, TOPICS, publications)
    publisher = rng.integers(0, NODES, publications)
    _write(run, "publications", {
        "pub_id": np.arange(publications), "publisher": publisher,
        "topic": [f"t{x}" for x in pub_topic], "t": pub_t, "size": np.full(publications, 100),
    })  # fmt: skip
    # deliveries: each subscriber of the topic (any subscription) with probability 0.97,
    # 3% of them twice; latency lognormal, hops 1..8
    by_topic: dict[int, np.ndarray] = {
        k: np.unique(sub_nodes[sub_topics == k]) for k in range(TOPICS)
    }
    d_pub, d_node = [], []
    for pub in range(publications):
        members = by_topic[int(pub_topic[pub])]
        got = members[rng.random(len(members)) < 0.97]
        d_pub.append(np.full(len(got), pub))
        d_node.append(got)
    pubs_col, nodes_col = np.concatenate(d_pub), np.concatenate(d_node)
    dup = rng.random(len(pubs_col)) < 0.03
    pubs_col = np.concatenate([pubs_col, pubs_col[dup]])
    nodes_col = np.concatenate([nodes_col, nodes_col[dup]])
    latency = rng.lognormal(np.log(0.05), 0.6, len(pubs_col)).round(6)
    _write(run, "deliveries", {
        "pub_id": pubs_col, "node": nodes_col, "t": pub_t[pubs_col] + latency,
        "hops": rng.integers(1, 9, len(pubs_col)).astype(np.int32),
    })  # fmt: skip
    # messages: one payload message per delivery (pub_id set), the rest control messages;
    # written in chunks (each from its own seeded stream), so that 10^8 rows fit in memory
    payload = min(len(pubs_col), messages)
    types = np.array(["IHave", "Graft", "Prune", "Shuffle", "Join"], dtype=object)
    (run / "messages").mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(
        run / "messages" / "part-00000.parquet", SCHEMAS["messages"], compression="zstd"
    ) as writer:
        for first in range(0, messages, MESSAGE_CHUNK):
            n = min(MESSAGE_CHUNK, messages - first)
            chunk = np.random.default_rng([7, first // MESSAGE_CHUNK])
            k = max(0, min(n, payload - first))  # payload rows come first: [first, first + k)
            control = n - k
            is_payload = np.arange(n) < k
            t_send = np.concatenate(
                [pub_t[pubs_col[first : first + k]], chunk.uniform(0, DURATION, control)]
            )
            columns = {
                "t_send": t_send,
                "t_recv": t_send + 0.01,
                "src": chunk.integers(0, NODES, n),
                "dst": np.concatenate(
                    [nodes_col[first : first + k], chunk.integers(0, NODES, control)]
                ),
                "type": np.concatenate(
                    [np.full(k, "Gossip", dtype=object), types[chunk.integers(0, 5, control)]]
                ),
                "layer": np.where(is_payload, "broadcast", "membership").astype(object),
                "payload": is_payload,
                # control messages carry no pub_id: null
                "pub_id": pa.array(
                    np.concatenate([pubs_col[first : first + k], np.zeros(control, np.int64)]),
                    pa.int64(),
                    mask=~is_payload,
                ),
                "bytes": np.full(n, 60, dtype=np.int32),
            }
            writer.write_table(_table("messages", columns, n), row_group_size=ROW_GROUP)
    for table_name in ("snapshots", "checks", "faults", "events"):
        _write(run, table_name, {})


def cached_trace(root: Path, messages: int, publications: int) -> Path:
    """The synthetic trace's run directory under ``root``, generated unless a complete one
    (its last table written) is there."""
    run = root / f"trace-g{GENERATOR}-m{messages}-p{publications}"
    if not (run / "events").exists():
        shutil.rmtree(run, ignore_errors=True)
        generate(run, messages, publications)
    return run


def row_count(run: Path, table: str) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in (run / table).glob("*.parquet"))


# --------------------------------------------------------------------------------------------
# The two engines
# --------------------------------------------------------------------------------------------
PUB_COLUMNS = ["pub_id", "expected", "delivered", "receivers", "duplicates", "latency_p50",
               "latency_p95", "latency_p99", "latency_max", "hops_mean", "ldh",
               "payload_messages", "rmr"]  # fmt: skip
NODE_COLUMNS = ["node", "sent", "received", "load", "control_sent", "deliveries"]


def spark_metrics(spark: Any, run: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    from pubmesh.analysis import metrics
    from pubmesh.analysis.job import materialize, publication_metrics
    from pubmesh.analysis.load import inspect, load

    trace = load(spark, [inspect(run)])
    # as pubmesh analyze does (pubmesh.analysis.job.compute): the first deliveries, which
    # both tables use, computed once
    first = materialize(metrics.first_deliveries(trace.deliveries, trace.publications))
    pubs = publication_metrics(trace, first, content_based=False).select(*PUB_COLUMNS)
    nodes = metrics.per_node(trace, metrics.message_totals(trace), first).select(*NODE_COLUMNS)
    return (
        [tuple(r) for r in pubs.orderBy("pub_id").collect()],
        [tuple(r) for r in nodes.orderBy("node").collect()],
    )


DUCK_PUBS = """
WITH ev AS (SELECT node, t, event, lead(t) OVER (PARTITION BY node ORDER BY t, event) AS t_next
            FROM read_parquet('{run}/nodes/*.parquet')),
life AS (SELECT node, t AS t_up, coalesce(t_next, 'inf'::DOUBLE) AS t_down FROM ev
         WHERE event IN ('up', 'recover')),
pubs AS (SELECT * FROM read_parquet('{run}/publications/*.parquet')),
subs AS (SELECT * FROM read_parquet('{run}/subscriptions/*.parquet')),
dels AS (SELECT * FROM read_parquet('{run}/deliveries/*.parquet')),
win AS (SELECT duration AS w FROM read_parquet('{run}/runs/*.parquet')),
expected AS (
  SELECT DISTINCT p.pub_id, s.node FROM pubs p JOIN subs s ON s.topic = p.topic, win
  JOIN life l ON l.node = s.node
  WHERE s.t_start <= p.t AND (s.t_end IS NULL OR s.t_end >= win.w)
    AND l.t_up <= p.t AND l.t_down >= win.w),
first AS (
  SELECT pub_id, node, min(t) AS t, arg_min(hops, (t, hops)) AS hops, count(*) AS copies
  FROM dels GROUP BY pub_id, node),
got AS (
  SELECT f.pub_id, count(*) AS receivers, sum(copies - 1) AS duplicates,
    quantile_cont(f.t - p.t, 0.5) AS p50, quantile_cont(f.t - p.t, 0.95) AS p95,
    quantile_cont(f.t - p.t, 0.99) AS p99, max(f.t - p.t) AS pmax, avg(hops) AS hops_mean,
    arg_max(hops, (f.t, hops)) AS ldh
  FROM first f JOIN pubs p USING (pub_id) GROUP BY f.pub_id),
wanted AS (SELECT pub_id, count(*) AS n FROM expected GROUP BY pub_id),
hit AS (SELECT e.pub_id, count(*) AS n FROM expected e JOIN first f USING (pub_id, node)
        GROUP BY e.pub_id),
payload AS (SELECT pub_id, count(*) AS n FROM read_parquet('{run}/messages/*.parquet')
            WHERE payload AND pub_id IS NOT NULL GROUP BY pub_id)
SELECT p.pub_id, coalesce(wanted.n, 0), coalesce(hit.n, 0), coalesce(got.receivers, 0),
  coalesce(got.duplicates, 0), got.p50, got.p95, got.p99, got.pmax, got.hops_mean, got.ldh,
  coalesce(payload.n, 0),
  CASE WHEN got.receivers >= 2 THEN coalesce(payload.n, 0) / (got.receivers - 1) - 1 END
FROM pubs p LEFT JOIN wanted USING (pub_id) LEFT JOIN hit USING (pub_id)
  LEFT JOIN got USING (pub_id) LEFT JOIN payload USING (pub_id)
ORDER BY p.pub_id
"""

DUCK_NODES = """
WITH m AS (SELECT * FROM read_parquet('{run}/messages/*.parquet')),
n AS (SELECT DISTINCT node FROM read_parquet('{run}/nodes/*.parquet')),
s AS (SELECT src AS node, count(*) AS sent, count(*) FILTER (WHERE NOT payload) AS control
      FROM m GROUP BY src),
r AS (SELECT dst AS node, count(*) AS received FROM m WHERE t_recv IS NOT NULL GROUP BY dst),
d AS (SELECT node, count(DISTINCT pub_id) AS deliveries
      FROM read_parquet('{run}/deliveries/*.parquet') GROUP BY node)
SELECT n.node, coalesce(sent, 0), coalesce(received, 0),
  coalesce(sent, 0) + coalesce(received, 0), coalesce(control, 0), coalesce(deliveries, 0)
FROM n LEFT JOIN s USING (node) LEFT JOIN r USING (node) LEFT JOIN d USING (node)
ORDER BY n.node
"""


def duckdb_metrics(run: Path, threads: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    import duckdb

    db = duckdb.connect()
    db.execute(f"SET threads = {threads}")
    pubs = db.execute(DUCK_PUBS.format(run=run)).fetchall()
    nodes = db.execute(DUCK_NODES.format(run=run)).fetchall()
    return pubs, nodes


def same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], what: str) -> str | None:
    if len(a) != len(b):
        return f"{what}: {len(a)} rows against {len(b)}"
    for row_a, row_b in zip(a, b, strict=True):
        for x, y in zip(row_a, row_b, strict=True):
            if x is None or y is None:
                if x is not y and not (x is None and y is None):
                    return f"{what}: {row_a} against {row_b}"
            elif not math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-12):
                return f"{what}: {row_a} against {row_b}"
    return None


# --------------------------------------------------------------------------------------------
def fresh_process_seconds(code: str) -> float:
    """Run ``code`` in a fresh Python process; the seconds it prints last."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def cold_spark(run: Path) -> float:
    """A fresh process: import, JVM and session start, the metrics, collect."""
    code = (
        "import time, sys; t = time.perf_counter()\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from bench_analysis import spark_metrics\n"
        "from pubmesh.analysis.spark import get_session\n"
        "from pathlib import Path\n"
        f"spark_metrics(get_session(), Path({str(run)!r}))\n"
        "print(time.perf_counter() - t)\n"
    )
    return fresh_process_seconds(code)


def cold_duckdb(run: Path, threads: int) -> float:
    code = (
        "import time, sys; t = time.perf_counter()\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from bench_analysis import duckdb_metrics\n"
        "from pathlib import Path\n"
        f"duckdb_metrics(Path({str(run)!r}), {threads:d})\n"
        "print(time.perf_counter() - t)\n"
    )
    return fresh_process_seconds(code)


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({model}), {memory:.0f} GiB"


def trace_arguments(parser: argparse.ArgumentParser) -> None:
    """The synthetic trace's options, shared with bench_analysis_floor."""
    parser.add_argument("--messages", type=int, default=20_000_000)
    parser.add_argument("--publications", type=int, default=20_000)
    parser.add_argument("--out", default="out/bench/analysis")
    parser.add_argument("--json", help="write the figures here as JSON")


def trace_of(console: Any, args: argparse.Namespace) -> Path:
    """The cached synthetic trace ``args`` name, generated (with a spinner) if needed."""
    with console.status(f"the trace of {args.messages:,} message rows (generated once)…"):
        return cached_trace(Path(args.out).resolve(), args.messages, args.publications)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    trace_arguments(parser)
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    console = Console()
    run = trace_of(console, args)
    rows = {
        t: row_count(run, t) for t in ("messages", "deliveries", "publications", "subscriptions")
    }
    threads = os.cpu_count() or 2

    with console.status("cold runs (fresh processes)…"):
        spark_cold = cold_spark(run)
        duck_cold = cold_duckdb(run, threads)
    from pubmesh.analysis.spark import get_session

    with console.status("warm runs…"):
        spark = get_session()
        spark_metrics(spark, run)  # warm-up: JIT, file listing caches
        started = time.perf_counter()
        spark_pubs, spark_nodes = spark_metrics(spark, run)
        spark_warm = time.perf_counter() - started
        duckdb_metrics(run, threads)
        started = time.perf_counter()
        duck_pubs, duck_nodes = duckdb_metrics(run, threads)
        duck_warm = time.perf_counter() - started
    problem = same(spark_pubs, duck_pubs, "per publication") or same(
        spark_nodes, duck_nodes, "per node"
    )

    table = Table(title=f"core metrics: Spark (local[*]) vs DuckDB — {machine()}")
    for column in ("engine", "cold s", "warm s"):
        table.add_column(column, justify="right")
    table.add_row("Spark", f"{spark_cold:.1f}", f"{spark_warm:.1f}")
    table.add_row("DuckDB", f"{duck_cold:.1f}", f"{duck_warm:.1f}")
    table.add_row(
        "Spark ÷ DuckDB", f"{spark_cold / duck_cold:.2f}", f"{spark_warm / duck_warm:.2f}"
    )
    console.print(table)
    console.print(
        "rows: " + ", ".join(f"{k} {v:,}" for k, v in rows.items())
        + f"; results {'identical' if problem is None else 'DIFFER'}"
        + f"; goal Spark ÷ DuckDB ≤ 3 warm: {'met' if spark_warm / duck_warm <= 3 else 'not met'}"
    )  # fmt: skip
    figures = {
        "machine": machine(), "rows": rows, "threads": threads,
        "spark_cold_s": spark_cold, "spark_warm_s": spark_warm,
        "duckdb_cold_s": duck_cold, "duckdb_warm_s": duck_warm,
        "ratio_cold": spark_cold / duck_cold, "ratio_warm": spark_warm / duck_warm,
        "identical": problem is None,
    }  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    if problem is not None:
        console.print(f"[red]results differ[/]: {problem}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
