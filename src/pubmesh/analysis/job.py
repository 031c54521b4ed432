"""``pubmesh analyze``: one Spark job from trace v1 to metrics, a summary and a report.

The job reads one or many run directories (or sweep datasets), computes the metrics of
:mod:`pubmesh.analysis.metrics`, and writes into ``--out``:

``metrics/publications``, ``metrics/nodes``, ``metrics/node_messages``, ``metrics/overlay``,
``metrics/messages_per_second``, ``metrics/runs``
    Parquet datasets (one row per publication, node, (node, message type), snapshot graph,
    (second, type), run).
``summary.json``
    the per-run metrics as JSON, for scripts and CI.
``report.html``
    one self-contained file (the Plotly bundle inlined; ``--static``: PNG charts, also in
    ``figures/``): the run table, latency CDF, reliability by publish time with the faults
    marked, per-node load and degree distributions, messages per second by type.
"""

from __future__ import annotations

import html
import json
import math
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pubmesh.analysis import charts, metrics
from pubmesh.analysis.load import TraceSource, inspect, load
from pubmesh.analysis.metrics import Trace
from pubmesh.errors import TraceError
from pubmesh.stacks.base import StackSpec, available_stacks, get_stack

CDF_POINTS = [i / 100 for i in range(101)]


@dataclass
class Metrics:
    """The DataFrames one analysis produces (cached: each feeds several outputs)."""

    publications: DataFrame
    nodes: DataFrame
    node_messages: DataFrame
    overlay: DataFrame
    messages_per_second: DataFrame
    runs: DataFrame
    first: DataFrame
    #: :func:`metrics.node_degrees` of the overlay, per snapshot (the degree histogram)
    degrees: DataFrame

    def tables(self) -> dict[str, DataFrame]:
        return {
            "publications": self.publications,
            "nodes": self.nodes,
            "node_messages": self.node_messages,
            "overlay": self.overlay,
            "messages_per_second": self.messages_per_second,
            "runs": self.runs,
        }


def timeout_intervals(spark: SparkSession, trace: Trace) -> DataFrame:
    """(run_id, timeout_interval) for runs of stacks with a timeout action (their spec's
    ``timeout_param``), read from each run's scenario (``[stack.<stack>]``, else the parameter's
    default); the runs table is one row a run, so this reads it on the driver."""
    rows = []
    for run in trace.runs.select("run_id", "stack", "scenario").collect():
        spec = stack_specs().get(run["stack"])
        if spec is None or spec.timeout_param is None:
            continue
        try:
            data = tomllib.loads(run["scenario"] or "")
        except tomllib.TOMLDecodeError:
            continue
        table = data.get("stack", {}).get(run["stack"], {})
        interval = spec.timeout_interval(table if isinstance(table, dict) else None)
        if interval is not None:
            rows.append((run["run_id"], interval))
    return spark.createDataFrame(rows, "run_id string, timeout_interval double")


def stack_specs() -> dict[str, StackSpec]:
    """Every stack of this build by name (a trace of a stack this build lacks has none)."""
    return {name: get_stack(name) for name in available_stacks()}


def non_overlay_layers() -> list[str]:
    """Snapshot layers that are not overlay edges, from every stack's spec."""
    return sorted({layer for spec in stack_specs().values() for layer in spec.non_overlay_layers})


def has_filters(trace: Trace) -> bool:
    """Whether any subscription is content-based (a filter): only then does the analysis plan
    the filter-matching joins."""
    return bool(trace.subscriptions.where(F.col("filter").isNotNull()).limit(1).count())


def materialize(frame: DataFrame) -> DataFrame:
    """Compute ``frame`` now and keep it in the executors' memory with its lineage cut.

    The metrics reuse each other (deliveries feed publications and runs; message totals feed
    nodes and runs), and a Spark plan is a tree: without this, every reuse copies the whole
    upstream plan into the next, and the final per-run plan grows large enough to take the
    optimizer minutes and the driver's heap."""
    return frame.localCheckpoint(eager=True)


#: subscriptions up to which the per-subscriber ``since`` table (at most one row each) is
#: broadcast to the first deliveries instead of both being shuffled to meet (~80 bytes a row)
BROADCAST_SUBSCRIPTIONS = 500_000


def publication_metrics(trace: Trace, first: DataFrame, *, content_based: bool) -> DataFrame:
    """:func:`metrics.per_publication` of ``first`` (:func:`metrics.first_deliveries`), its
    ``since`` table broadcast when the subscriptions are few enough (one count over the
    subscriptions, which reads none of their columns)."""
    small = not content_based and trace.subscriptions.count() <= BROADCAST_SUBSCRIPTIONS
    return metrics.per_publication(trace, first, content_based=content_based, small_since=small)


def compute(spark: SparkSession, trace: Trace) -> Metrics:
    content_based = has_filters(trace)
    first = materialize(metrics.first_deliveries(trace.deliveries, trace.publications))
    publications = materialize(publication_metrics(trace, first, content_based=content_based))
    totals = materialize(metrics.message_totals(trace))
    nodes = materialize(metrics.per_node(trace, totals, first))
    # the overlay's edges and degrees once, for its per-snapshot figures and the histogram
    vertices, edges = metrics.overlay_edges(trace.snapshots, non_overlay_layers())
    edges = materialize(edges)
    degrees = materialize(metrics.degrees_of(vertices, edges))
    overlay = materialize(metrics.overlay_of(edges, degrees))
    convergence = materialize(metrics.convergence_time(trace.checks))
    history = materialize(metrics.history_reliability(trace, content_based=content_based))
    config = metrics.config_requests(trace, convergence, timeout_intervals(spark, trace))
    runs = materialize(
        metrics.per_run(
            trace,
            publications=publications,
            nodes=nodes,
            overlay=overlay,
            first=first,
            message_totals=totals,
            convergence=convergence,
            history=history,
            config=config,
        )
    )
    return Metrics(
        publications=publications,
        nodes=nodes,
        node_messages=totals,
        overlay=overlay,
        # written and plotted: computed once
        messages_per_second=materialize(metrics.messages_per_second(trace)),
        runs=runs,
        first=first,
        degrees=degrees,
    )


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def run_rows(runs: DataFrame) -> list[dict[str, Any]]:
    return [
        {k: _clean(v) for k, v in row.asDict().items()}
        for row in runs.orderBy("stack", "run_id").collect()
    ]


#: what a ``messages = "counts"`` trace cannot give: metrics that need each payload message
COUNTS_MISSING = ("rmr_mean", "rmr_std", "rmr_late", "false_positive_rate")


def counts_note(trace: Trace) -> tuple[str, str] | None:
    """A report section naming the runs whose trace keeps message counts only, and the
    metrics those runs cannot have (shown as "–"), instead of failing on them (issue 17)."""
    rows = trace.runs.where(F.col("messages_mode") == "counts").select("run_id").collect()
    if not rows:
        return None
    names = ", ".join(sorted(r["run_id"] for r in rows))
    missing = ", ".join(COUNTS_MISSING)
    return (
        "What message-count traces cannot give",
        f"<p class='note'>{len(rows)} run(s) keep per-second message counts, not each message "
        f'(<code>[trace] messages = "counts"</code>): {html.escape(names)}. RMR per '
        f"publication and the false-positive rate ({missing}) need each "
        "payload message, so they show as – for these runs; every other metric (reliability, "
        "latency, LDH, load, control overhead, degree) is computed as usual.</p>",
    )


def plot_data(trace: Trace, result: Metrics) -> dict[str, Any]:
    """The small frames every plot is drawn from (pandas, aggregated by Spark): ``cdf``
    (run_id, q, latency), ``buckets`` (run_id, bucket_t, reliability) with
    ``bucket_seconds``, ``faults`` (run_id, t, kind), ``load`` (run_id, load_bin, count) with
    ``load_width``, ``degrees`` (run_id, degree, count), ``per_second`` (second, type,
    sent) and ``stacks`` (run_id → stack, for the colours). A frame the trace has no data
    for is absent."""
    import pandas as pd

    data: dict[str, Any] = {
        "stacks": {r["run_id"]: r["stack"] for r in trace.runs.select("run_id", "stack").collect()}
    }
    cdf = result.first.groupBy("run_id").agg(F.percentile("latency", CDF_POINTS).alias("qs"))
    cdf_rows = [
        (r["run_id"], q, v)
        for r in cdf.collect()
        if r["qs"]
        for q, v in zip(CDF_POINTS, r["qs"], strict=True)
    ]
    if cdf_rows:
        data["cdf"] = pd.DataFrame(cdf_rows, columns=["run_id", "q", "latency"])
    data["faults"] = trace.faults.select("run_id", "t", "kind").toPandas()
    span = result.publications.agg(F.min("t"), F.max("t")).first()
    if span is not None and span[0] is not None:
        bucket = max(1.0, math.ceil((span[1] - span[0]) / 40))
        buckets = (
            result.publications.withColumn("bucket_t", F.floor(F.col("t") / bucket) * bucket)
            .groupBy("run_id", "bucket_t")
            .agg(
                # a bucket whose publications nobody expected (content filters that match no
                # one) has no reliability, rather than a division by zero under ANSI SQL
                F.when(F.sum("expected") > 0, F.sum("delivered") / F.sum("expected")).alias(
                    "reliability"
                )
            )
            .where(F.col("reliability").isNotNull())
            .toPandas()
        )
        if len(buckets):
            data["buckets"], data["bucket_seconds"] = buckets, bucket
    load = result.nodes.select("run_id", "load")
    top = load.agg(F.max("load")).first()
    if top is not None and top[0]:
        width = max(1.0, math.ceil(top[0] / 30))
        data["load"] = (
            load.withColumn("load_bin", F.floor(F.col("load") / width) * width)
            .groupBy("run_id", "load_bin")
            .agg(F.count("*").alias("count"))
            .toPandas()
        )
        data["load_width"] = width
    degree_hist = (
        metrics.at_last_snapshot(result.degrees).groupBy("run_id", "degree").count().toPandas()
    )
    if len(degree_hist):
        data["degrees"] = degree_hist
    per_second = (
        result.messages_per_second.groupBy("second", "type")
        .agg(F.sum("sent").alias("sent"))
        .toPandas()
    )
    if len(per_second):
        data["per_second"] = per_second
    return data


def make_plots(data: dict[str, Any]) -> dict[str, go.Figure]:
    """The report's charts (captioned Plotly figures), from :func:`plot_data`'s frames."""
    stacks = data.get("stacks", {})
    figures: dict[str, go.Figure] = {}
    if "cdf" in data:
        figures["Latency CDF"] = charts.run_latency_cdf(data["cdf"], stacks)
    if "buckets" in data:
        figures["Reliability by publish time"] = charts.run_reliability(
            data["buckets"], data["faults"], data["bucket_seconds"], stacks
        )
    if "load" in data:
        figures["Per-node load"] = charts.run_histogram(
            data["load"], "load_bin", "count", stacks,
            title="Per-node load (messages in + out)",
            xlabel=f"messages in + out (bins of {data['load_width']:g})",
        )  # fmt: skip
    if "degrees" in data:
        figures["Degree distribution (last snapshot)"] = charts.run_histogram(
            data["degrees"], "degree", "count", stacks,
            title="Degree distribution at the last snapshot",
            xlabel="degree (overlay neighbours per node and topic)",
        )  # fmt: skip
    if "per_second" in data:
        figures["Messages per second by type"] = charts.messages_per_second(data["per_second"])
    return figures


def write_tables(result: Metrics, out: Path) -> None:
    for name, frame in result.tables().items():
        frame.coalesce(1).write.mode("overwrite").parquet(str(out / "metrics" / name))


@dataclass
class Analysis:
    sources: list[TraceSource]
    trace: Trace
    metrics: Metrics
    rows: list[dict[str, Any]]
    figures: dict[str, go.Figure]
    #: the frames the figures were drawn from (:func:`plot_data`)
    data: dict[str, Any]
    #: report sections about the data itself (:func:`counts_note`)
    notes: list[tuple[str, str]]


#: Parquet bytes of input per shuffle partition of an analysis (a run's trace of a few MB gets
#: one: its shuffles are all fixed cost, and every extra partition is a task in every stage)
BYTES_PER_PARTITION = 32 * 1024 * 1024


@contextmanager
def shuffle_partitions(spark: SparkSession, size: int) -> Iterator[int]:
    """Within the block, shuffles have one partition per :data:`BYTES_PER_PARTITION` of input
    (at least one, at most the session's setting, which is restored after). Adaptive
    execution coalesces small partitions too, but only after the map side has written them
    all: on a small trace that took a fifth of the warm analysis time."""
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key) or "200"
    wanted = max(1, min(int(before), math.ceil(size / BYTES_PER_PARTITION)))
    spark.conf.set(key, str(wanted))
    try:
        yield wanted
    finally:
        spark.conf.set(key, before)


def analyze(
    spark: SparkSession,
    roots: Sequence[Path | TraceSource],
    out: Path,
    *,
    title: str | None = None,
    report: bool = True,
    static: bool = False,
) -> Analysis:
    """Check, load, compute and write ``metrics/`` and ``summary.json`` (and ``report.html``
    unless ``report`` is false: a sweep adds its comparison first; ``static``: PNG charts),
    with as many shuffle partitions as the input's size wants (:func:`shuffle_partitions`).
    ``roots`` are run directories or sweep datasets, or what :func:`inspect` already made of
    them (the CLI checks the traces before it starts the JVM, and they are not read twice)."""
    sources = [r if isinstance(r, TraceSource) else inspect(r) for r in roots]
    trace = load(spark, sources)
    with shuffle_partitions(spark, sum(source.size for source in sources)):
        return _analyze(spark, sources, trace, out, title=title, report=report, static=static)


def _analyze(
    spark: SparkSession,
    sources: list[TraceSource],
    trace: Trace,
    out: Path,
    *,
    title: str | None,
    report: bool,
    static: bool,
) -> Analysis:
    from pubmesh.analysis.report import charts_of, write_report

    try:
        result = compute(spark, trace)
        out.mkdir(parents=True, exist_ok=True)
        write_tables(result, out)
        rows = run_rows(result.runs)
        data = plot_data(trace, result)
        figures = make_plots(data)
        notes = [note] if (note := counts_note(trace)) else []
    except Exception as error:  # a data page that only Spark's reader found broken
        raise _trace_error(error, sources) from error
    (out / "summary.json").write_text(
        json.dumps(
            {"sources": [str(s.root) for s in sources], "runs": rows}, indent=2, sort_keys=True
        )
        + "\n"
    )
    if report:
        write_report(
            out / "report.html",
            title or "pubmesh analyze: " + ", ".join(str(s.root) for s in sources),
            rows,
            charts_of(figures),
            notes,
            static=static,
        )
    return Analysis(sources, trace, result, rows, figures, data, notes)


def _trace_error(error: Exception, sources: list[TraceSource]) -> Exception:
    text = str(error)
    for source in sources:
        for files in source.tables.values():
            for path in files:
                if str(path.resolve()) in text or (path.name in text and str(path.parent) in text):
                    return TraceError(f"{path}: Spark cannot read it ({_first_line(text)})")
    if any(m in text for m in ("FAILED_READ_FILE", "is not a Parquet file", "read footer")):
        return TraceError(f"{sources[0].root}: Spark cannot read the trace ({_first_line(text)})")
    return error


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "unknown error"
