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

import functools
import html
import json
import math
import re
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pubmesh.analysis import charts, metrics, runtask
from pubmesh.analysis.load import (
    TraceSource,
    check_distinct,
    inspect,
    load,
    read_table,
    spark_schema_of,
)
from pubmesh.analysis.metrics import CDF_POINTS, Trace
from pubmesh.errors import TraceError
from pubmesh.stacks.base import StackSpec, available_stacks, get_stack

#: an analysis's steps in order, each announced to the caller's ``step`` callback as it starts
#: (:class:`pubmesh.analysis.progress.AnalysisProgress` draws them as a bar)
STEPS = (
    "first deliveries", "publications", "message totals", "nodes", "overlay edges", "degrees",
    "overlay", "convergence", "history", "runs", "messages per second", "writing metrics",
    "plot data", "report",
)  # fmt: skip
Step = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class Metrics:
    """The DataFrames one analysis produces (cached: each feeds several outputs)."""

    publications: DataFrame
    nodes: DataFrame
    node_messages: DataFrame
    overlay: DataFrame
    messages_per_second: DataFrame
    runs: DataFrame
    #: the first deliveries and :func:`metrics.node_degrees` of the overlay per snapshot (the
    #: latency CDF and the degree histogram); None when the runs were analysed in tasks
    #: (:mod:`pubmesh.analysis.runtask`), which return those charts' data instead
    first: DataFrame | None
    degrees: DataFrame | None

    def tables(self) -> dict[str, DataFrame]:
        """The tables written to ``metrics/`` (:data:`WRITTEN`), by name."""
        return {name: getattr(self, name) for name in WRITTEN}


#: the metric tables an analysis writes to ``metrics/<name>``
WRITTEN = ("publications", "nodes", "node_messages", "overlay", "messages_per_second", "runs")


def timeout_intervals(spark: SparkSession, trace: Trace) -> DataFrame:
    """(run_id, timeout_interval) for runs of stacks with a timeout action (their spec's
    ``timeout_param``), read from each run's scenario (``[stack.<stack>]``, else the parameter's
    default); the runs table is one row a run, so this reads it on the driver."""
    rows = []
    for run in trace.runs.select("run_id", "stack", "scenario").collect():
        interval = timeout_interval(run["stack"], run["scenario"])
        if interval is not None:
            rows.append((run["run_id"], interval))
    return spark.createDataFrame(rows, "run_id string, timeout_interval double")


def timeout_interval(stack: str, scenario: str | None) -> float | None:
    """The timeout interval of a run of ``stack`` whose scenario is ``scenario`` (TOML), or
    None for a stack without a timeout action."""
    spec = stack_specs().get(stack)
    if spec is None or spec.timeout_param is None:
        return None
    try:
        data = tomllib.loads(scenario or "")
    except tomllib.TOMLDecodeError:
        return None
    table = data.get("stack", {}).get(stack, {})
    return spec.timeout_interval(table if isinstance(table, dict) else None)


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


def compute(spark: SparkSession, trace: Trace, step: Step = _quiet) -> Metrics:
    """Every metric table, each computed once (:func:`materialize`); ``step`` hears each of
    :data:`STEPS` up to "messages per second" as it starts."""
    content_based = has_filters(trace)
    step("first deliveries")
    first = materialize(metrics.first_deliveries(trace.deliveries, trace.publications))
    step("publications")
    publications = materialize(publication_metrics(trace, first, content_based=content_based))
    step("message totals")
    totals = materialize(metrics.message_totals(trace))
    step("nodes")
    nodes = materialize(metrics.per_node(trace, totals, first))
    # the overlay's edges and degrees once, for its per-snapshot figures and the histogram
    step("overlay edges")
    vertices, edges = metrics.overlay_edges(trace.snapshots, non_overlay_layers())
    edges = materialize(edges)
    step("degrees")
    degrees = materialize(metrics.degrees_of(vertices, edges))
    step("overlay")
    overlay = materialize(metrics.overlay_of(edges, degrees))
    step("convergence")
    convergence = materialize(metrics.convergence_time(trace.checks))
    step("history")
    history = materialize(metrics.history_reliability(trace, content_based=content_based))
    step("runs")
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
    step("messages per second")
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
    metrics those runs cannot have (shown as "–"), instead of failing on them, so a large run
    traced as counts stays analysable."""
    rows = trace.runs.where(F.col("messages_mode") == "counts").select("run_id").collect()
    return counts_note_of([r["run_id"] for r in rows])


def counts_note_of(run_ids: Sequence[str]) -> tuple[str, str] | None:
    """:func:`counts_note` for the runs ``run_ids`` (those that keep counts)."""
    if not run_ids:
        return None
    names = ", ".join(sorted(run_ids))
    missing = ", ".join(COUNTS_MISSING)
    return (
        "What message-count traces cannot give",
        f"<p class='note'>{len(run_ids)} run(s) keep per-second message counts, not each message "
        f'(<code>[trace] messages = "counts"</code>): {html.escape(names)}. RMR per '
        f"publication and the false-positive rate ({missing}) need each "
        "payload message, so they show as – for these runs; every other metric (reliability, "
        "latency, LDH, load, control overhead, degree) is computed as usual.</p>",
    )


def plot_data(trace: Trace, result: Metrics) -> dict[str, Any]:
    """The small frames every plot is drawn from (pandas, aggregated by Spark): ``cdf``
    (run_id, q, latency), ``buckets`` (run_id, bucket_t, reliability) with
    ``bucket_seconds``, ``faults`` (run_id, t, kind), ``load`` (run_id, load_bin, count) with
    ``load_width``, ``degrees`` (run_id, degree, count), ``per_second`` (run_id, second,
    type, sent: each run's own, never summed across runs) and ``stacks`` (run_id → stack,
    for the colours). A frame the trace has no data for is absent.

    Four Spark jobs in all, whatever the number of charts: the runs and the faults (a few rows
    each), the two scales the bins need (publish-time span, top load), then every chart's
    aggregate in one union collected at once. Each job is a fixed cost of a few hundred
    milliseconds on a small trace; one job per chart would make this the analysis's dearest
    step after the metrics themselves."""
    runs = [r.asDict() for r in trace.runs.select("run_id", "stack", "nodes").collect()]
    fault_rows = [
        r.asDict() for r in trace.faults.select("run_id", "t", "kind", "detail").collect()
    ]
    scales = (
        result.publications.agg(F.min("t").alias("t_first"), F.max("t").alias("t_last"))
        .crossJoin(result.nodes.agg(F.max("load").alias("top")))
        .first()
    )
    bucket, width = _scales(None if scales is None else scales.asDict())

    def part(name: str, frame: DataFrame, x: Any, y: Any, label: Any = None) -> DataFrame:
        return frame.select(
            F.lit(name).alias("plot"),
            "run_id",
            F.col(x).cast("double").alias("x") if isinstance(x, str) else x.alias("x"),
            F.col(y).cast("double").alias("y") if isinstance(y, str) else y.alias("y"),
            (F.lit(None).cast("string") if label is None else F.col(label)).alias("label"),
        )

    assert result.first is not None and result.degrees is not None
    cdf = result.first.groupBy("run_id").agg(F.percentile("latency", CDF_POINTS).alias("qs"))
    parts = [
        part(
            "cdf",
            cdf.select("run_id", F.posexplode("qs").alias("i", "latency")),
            F.col("i").cast("double") / F.lit(100.0),
            "latency",
        ),
        part(
            "degrees",
            metrics.at_last_snapshot(result.degrees).groupBy("run_id", "degree").count(),
            "degree",
            "count",
        ),
        part(
            "per_second",
            result.messages_per_second.groupBy("run_id", "second", "type").agg(
                F.sum("sent").alias("sent")
            ),
            "second",
            "sent",
            "type",
        ),
    ]
    if bucket is not None:
        in_bucket = result.publications.withColumn(
            "bucket_t", F.floor(F.col("t") / bucket) * bucket
        )
        # a bucket whose publications nobody expected (content filters that match no one) has
        # no reliability, rather than a division by zero under ANSI SQL
        reliability = F.when(F.sum("expected") > 0, F.sum("delivered") / F.sum("expected"))
        buckets = in_bucket.groupBy("run_id", "bucket_t").agg(reliability.alias("reliability"))
        kept = buckets.where(F.col("reliability").isNotNull())
        parts.append(part("buckets", kept, "bucket_t", "reliability"))
    if width is not None:
        binned = result.nodes.withColumn("load_bin", F.floor(F.col("load") / width) * width)
        parts.append(
            part("load", binned.groupBy("run_id", "load_bin").count(), "load_bin", "count")
        )
    union = parts[0]
    for more in parts[1:]:
        union = union.unionByName(more)
    return _plot_frames(runs, fault_rows, union.toPandas(), bucket, width)


def _scales(scales: dict[str, Any] | None) -> tuple[Any, Any]:
    """The reliability buckets' width (a 40th of the publish-time span, whole seconds) and the
    load histogram's bin width (a 30th of the top load), from the first and last publish
    time (``t_first``, ``t_last``) and the top load (``top``) over every run."""
    bucket = width = None
    if scales is not None and scales.get("t_first") is not None:
        bucket = max(1.0, math.ceil((scales["t_last"] - scales["t_first"]) / 40))
    if scales is not None and scales.get("top"):
        width = max(1.0, math.ceil(scales["top"] / 30))
    return bucket, width


def _plot_frames(
    runs: Sequence[dict[str, Any]],
    fault_rows: Sequence[dict[str, Any]],
    rows: Any,
    bucket: Any,
    width: Any,
) -> dict[str, Any]:
    """:func:`plot_data`'s result from the runs (run_id, stack, nodes), the faults' rows and
    every chart's aggregate (pandas: plot, run_id, x, y, label)."""
    import pandas as pd

    faults = fault_summaries(fault_rows, runs)
    labels = run_labels([r["run_id"] for r in runs], faults)
    data: dict[str, Any] = {
        "stacks": {r["run_id"]: r["stack"] for r in runs},
        "labels": labels,
        "fault_summaries": faults,
        "faults": pd.DataFrame(
            [(r["run_id"], float(r["t"]), r["kind"]) for r in fault_rows],
            columns=["run_id", "t", "kind"],
        ).astype({"t": "float64"}),
    }
    by_plot = {name: frame for name, frame in pd.DataFrame(rows).groupby("plot", sort=False)}

    def frame(name: str, x: str, y: str, *, ints: Sequence[str] = (), label: str = "") -> None:
        """The union's rows of chart ``name`` as its own frame: x and y (and the label)
        under their names, counts back to integers."""
        got = by_plot.get(name)
        if got is None or not len(got):
            return
        names = {"x": x, **({"label": label} if label else {}), "y": y}
        out = got[["run_id", *names]].rename(columns=names).reset_index(drop=True)
        data[name] = out.astype({column: "int64" for column in ints})

    frame("cdf", "q", "latency")
    # a bin's start is whole when its width is (an int from math.ceil), as Spark typed it
    frame("buckets", "bucket_t", "reliability", ints=["bucket_t"] * isinstance(bucket, int))
    frame("load", "load_bin", "count", ints=["count"] + ["load_bin"] * isinstance(width, int))
    frame("degrees", "degree", "count", ints=["degree", "count"])
    frame("per_second", "second", "sent", ints=["second", "sent"], label="type")
    if "buckets" in data:
        data["bucket_seconds"] = bucket
    if "load" in data:
        data["load_width"] = width
    return data


def fault_summaries(faults: Sequence[Any], rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """run_id → what its faults did, in a few words ("50% crashed at 40 s, healed at 60 s"),
    from the faults table's rows (run_id, t, kind, detail: a few a run, one a fault; churn's
    per-node rows are left to its own row), node counts as shares of the run's nodes."""
    nodes = {str(r["run_id"]): r.get("nodes") or 0 for r in rows}
    found: dict[str, list[tuple[float, str]]] = {}
    for row in faults:
        if str(row["kind"]).startswith("churn-"):
            continue
        run_id, at, kind = str(row["run_id"]), float(row["t"]), str(row["kind"])
        try:
            detail = json.loads(row["detail"] or "{}")
        except ValueError:
            detail = {}
        detail = detail if isinstance(detail, dict) else {}
        if isinstance(detail.get("nodes"), list):
            total, count = nodes.get(run_id) or 0, len(detail["nodes"])
            share = f"{count / total:.0%}" if total else f"{count:,} nodes"
            verb = {"crash": "crashed", "leave": "left", "recover": "recovered"}.get(kind, kind)
            text = f"{share} {verb} at {at:g} s"
        elif kind == "partition":
            text = f"partitioned at {at:g} s"
        elif kind == "heal":
            text = f"healed at {at:g} s"
        elif kind == "churn":
            text = f"churn from {at:g} s"
        else:
            text = f"{kind} at {at:g} s"
        found.setdefault(run_id, []).append((at, text))
    return {run_id: ", ".join(text for _, text in sorted(parts)) for run_id, parts in found.items()}


def run_labels(run_ids: Sequence[str], hints: dict[str, str] | None = None) -> dict[str, str]:
    """A name per run for legends: its id without the scenario hash that ends it
    (``paper004-gossip-s1``); where two runs would share a name, with what sets them apart
    when ``hints`` (run_id → e.g. its faults) says ("…-s1, 85% crashed at 20 s"), else the
    whole id."""
    hints = hints or {}
    bare = {r: re.sub(r"-[0-9a-f]{8}$", "", r) for r in run_ids}
    taken = Counter(bare.values())
    hinted = Counter((name, hints.get(r)) for r, name in bare.items())
    labels = {}
    for run_id, name in bare.items():
        hint = hints.get(run_id)
        if taken[name] == 1:
            labels[run_id] = name
        elif hint and hinted[(name, hint)] == 1:
            labels[run_id] = f"{name}, {hint}"
        else:
            labels[run_id] = run_id
    return labels


def make_plots(data: dict[str, Any]) -> dict[str, go.Figure]:
    """The report's charts (captioned Plotly figures), from :func:`plot_data`'s frames; runs
    are named in legends by their labels (:func:`run_labels`), not their ids."""
    data = _labelled(data)
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
            unit="(node, topic) pairs",
        )  # fmt: skip
    if "per_second" in data:
        figures["Messages per second by type"] = charts.messages_per_second(
            data["per_second"], stacks
        )
    return figures


def _labelled(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every run_id replaced by its label (legends name runs by what tells
    them apart, not by their ids' hashes)."""
    labels: dict[str, str] = data.get("labels", {})
    shown = dict(data)
    shown["stacks"] = {labels.get(r, r): s for r, s in data.get("stacks", {}).items()}
    for name in ("cdf", "faults", "buckets", "load", "degrees", "per_second"):
        frame = data.get(name)
        if frame is not None:
            shown[name] = frame.assign(run_id=frame["run_id"].map(lambda r: labels.get(r, r)))
    return shown


#: the steps of an analysis whose runs are each analysed in one task (:func:`in_tasks`)
TASK_STEPS = ("metrics in tasks", "writing metrics", "plot data", "report")


def run_units(sources: Sequence[TraceSource]) -> list[tuple[str, bool, dict[str, list[str]], int]]:
    """(run_id, partitioned, files by table, bytes) per run: a sweep dataset's run has the
    files of its ``run_id=`` partitions, a run directory's every file."""
    units = []
    for source in sources:
        for run_id in source.run_ids:
            files: dict[str, list[str]] = {}
            for table, paths in source.tables.items():
                mine = [
                    p for p in paths
                    if not source.partitioned or p.parent == source.root / table
                    or p.parent.name == f"run_id={run_id}"
                ]  # fmt: skip
                files[table] = [str(p.resolve()) for p in mine]
            size = sum(Path(p).stat().st_size for paths in files.values() for p in paths)
            units.append((run_id, source.partitioned, files, size))
    return sorted(units)


def in_tasks(sources: Sequence[TraceSource], limit: int = runtask.TASK_RUN_BYTES) -> bool:
    """Whether every run is small enough to be analysed in one task (at most ``limit`` bytes
    of Parquet, :data:`pubmesh.analysis.runtask.TASK_RUN_BYTES`)."""
    return all(size <= limit for *_, size in run_units(sources))


def compute_in_tasks(
    spark: SparkSession,
    sources: Sequence[TraceSource],
    runs: pa.Table,
    done: dict[str, dict[str, bytes]] | None = None,
) -> dict[str, pa.Table]:
    """Every metric table (and the charts' ``cdf`` and ``degrees``) of every run, each run
    analysed in one Spark task (:mod:`pubmesh.analysis.runtask`), one task per run side by
    side; the tables come back to the driver as Arrow data, a run's after another's. ``done``
    holds runs already analysed (run_id → :func:`runtask.analyse`'s tables: a sweep's tasks
    analyse the run they simulate); no task runs for those."""
    done = done or {}
    layers = non_overlay_layers()
    scenario = {r["run_id"]: r for r in runs.to_pylist()}
    units = [
        runtask.unit(
            run_id, partitioned, files, non_overlay_layers=layers,
            timeout_interval=timeout_interval(
                scenario[run_id]["stack"], scenario[run_id]["scenario"]
            ),
        )
        for run_id, partitioned, files, _ in run_units(sources)
        if run_id not in done
    ]  # fmt: skip
    got: dict[str, dict[str, pa.Table]] = {}
    for run_id, encoded in done.items():
        for name, data in encoded.items():
            got.setdefault(name, {})[run_id] = runtask.from_ipc(data)
    # one partition per run, each holding the run's index: the units travel with the task's
    # function, and no local data is shipped or shuffled to spread them over the executors
    if units:
        ids = spark.range(0, len(units), 1, len(units))
        function = functools.partial(runtask.task_of, units)
        schema = "run_id string, table string, data binary"
        for row in ids.mapInArrow(function, schema).collect():
            got.setdefault(row["table"], {})[row["run_id"]] = runtask.from_ipc(row["data"])
    return {
        name: pa.concat_tables([got.get(name, {})[r] for r in sorted(got.get(name, {}))])
        if got.get(name) else schema.empty_table()
        for name, schema in runtask.OUTPUT_SCHEMAS.items()
    }  # fmt: skip


def plot_data_of_tables(
    tables: dict[str, pa.Table], runs: pa.Table, faults: pa.Table
) -> dict[str, Any]:
    """:func:`plot_data` from the tables :func:`compute_in_tasks` returned (the same frames,
    aggregated by pandas on the driver from a few thousand rows)."""
    import pandas as pd

    pubs = tables["publications"].to_pandas()
    nodes = tables["nodes"].to_pandas()
    bucket, width = _scales(
        {
            "t_first": pubs["t"].min() if len(pubs) else None,
            "t_last": pubs["t"].max() if len(pubs) else None,
            "top": int(nodes["load"].max()) if len(nodes) else None,
        }
    )
    parts = []

    def part(name: str, frame: pd.DataFrame, x: str, y: str, label: str | None = None) -> None:
        if len(frame):
            parts.append(pd.DataFrame({
                "plot": name, "run_id": frame["run_id"].to_numpy(),
                "x": frame[x].astype("float64").to_numpy(),
                "y": frame[y].astype("float64").to_numpy(),
                "label": frame[label].to_numpy() if label else None,
            }))  # fmt: skip

    part("cdf", tables["cdf"].to_pandas(), "q", "latency")
    part("degrees", tables["degrees"].to_pandas(), "degree", "count")
    per_second = tables["messages_per_second"].to_pandas()
    part(
        "per_second",
        per_second.groupby(["run_id", "second", "type"], dropna=False, as_index=False)[
            "sent"
        ].sum(),
        "second", "sent", "type",
    )  # fmt: skip
    if bucket is not None:
        at = (pubs["t"] / bucket).apply(math.floor) * bucket
        sums = (
            pubs.assign(bucket_t=at)
            .groupby(["run_id", "bucket_t"], as_index=False)[["expected", "delivered"]]
            .sum()
        )
        sums = sums[sums["expected"] > 0]
        part("buckets", sums.assign(reliability=sums["delivered"] / sums["expected"]),
             "bucket_t", "reliability")  # fmt: skip
    if width is not None:
        binned = nodes.assign(load_bin=(nodes["load"] / width).apply(math.floor) * width)
        part("load", binned.groupby(["run_id", "load_bin"]).size().rename("count").reset_index(),
             "load_bin", "count")  # fmt: skip
    rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["plot", "run_id", "x", "y", "label"]
    )  # fmt: skip
    return _plot_frames(
        [{k: r[k] for k in ("run_id", "stack", "nodes")} for r in runs.to_pylist()],
        faults.to_pylist(), rows, bucket, width,
    )  # fmt: skip


def write_arrow_tables(tables: dict[str, pa.Table], out: Path) -> None:
    """The metric tables as ``metrics/<name>/part-00000.parquet``, what was there before
    replaced (as Spark's ``overwrite``)."""
    import shutil

    for name in WRITTEN:
        directory = out / "metrics" / name
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        pq.write_table(tables[name], directory / "part-00000.parquet")


def write_tables(result: Metrics, out: Path) -> None:
    for name, frame in result.tables().items():
        frame.coalesce(1).write.mode("overwrite").parquet(str(out / "metrics" / name))


@dataclass
class Analysis:
    sources: list[TraceSource]
    #: the trace as Spark DataFrames; None when the runs were analysed in tasks (which read
    #: their own runs' files)
    trace: Trace | None
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


@contextmanager
def static_plans(spark: SparkSession, size: int) -> Iterator[bool]:
    """Within the block, an input of at most :data:`pubmesh.analysis.spark.SMALL_INPUT_BYTES`
    runs without adaptive query execution (True then; the session's setting is restored
    after). Adaptive execution runs each shuffle stage as a job of its own and plans the rest
    again after it: on a small trace there is nothing to coalesce, split or broadcast that
    one partition a shuffle does not already give, and the analysis of the README's
    1,000-node run with it ran 113 jobs instead of 58 and took a sixth longer."""
    from pubmesh.analysis.spark import SMALL_INPUT_BYTES

    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key) or "true"
    static = size <= SMALL_INPUT_BYTES
    if static:
        spark.conf.set(key, "false")
    try:
        yield static
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
    step: Step = _quiet,
    engine: str = "auto",
    done: dict[str, dict[str, bytes]] | None = None,
) -> Analysis:
    """Check, load, compute and write ``metrics/`` and ``summary.json`` (and ``report.html``
    unless ``report`` is false: a sweep adds its comparison first; ``static``: PNG charts),
    with as many shuffle partitions as the input's size wants (:func:`shuffle_partitions`),
    a small input without adaptive execution (:func:`static_plans`).
    ``roots`` are run directories or sweep datasets, or what :func:`inspect` already made of
    them (the CLI checks the traces before it starts the JVM, and they are not read twice).
    ``step`` hears each of :func:`steps_for` as it starts. ``engine``: ``"tasks"`` analyses
    each run in one Spark task (:mod:`pubmesh.analysis.runtask`), ``"plan"`` all runs in one
    Spark plan (:func:`compute`), ``"auto"`` the first when every run is small
    (:func:`in_tasks`); with tasks, ``done`` holds runs already analysed
    (:func:`compute_in_tasks`)."""
    sources = [r if isinstance(r, TraceSource) else inspect(r) for r in roots]
    out = out.resolve()  # a Spark Connect server writes it, from a directory of its own
    if engine not in ("auto", "tasks", "plan"):
        raise ValueError(f"engine {engine!r}: one of auto, tasks, plan")
    trace = None
    if engine == "tasks" or (engine == "auto" and in_tasks(sources)):
        check_distinct(sources)
        parts = _by_tasks(spark, sources, out, step, done)
    else:
        trace = load(spark, sources)
        size = sum(source.size for source in sources)
        with shuffle_partitions(spark, size), static_plans(spark, size):
            parts = _by_plan(spark, sources, trace, out, step)
    return _finish(sources, trace, *parts, out, title=title, report=report, static=static,
                   step=step)  # fmt: skip


#: what an analysis's metrics give its summary and report: the tables, the run rows, the
#: charts' data, the charts, the report's notes
Parts = tuple[
    Metrics, list[dict[str, Any]], dict[str, Any], dict[str, go.Figure], list[tuple[str, str]]
]


def _by_plan(
    spark: SparkSession, sources: list[TraceSource], trace: Trace, out: Path, step: Step
) -> Parts:
    """The metrics by one Spark plan over every run (:func:`compute`), written."""
    try:
        result = compute(spark, trace, step)
        out.mkdir(parents=True, exist_ok=True)
        step("writing metrics")
        write_tables(result, out)
        rows = run_rows(result.runs)
        step("plot data")
        data = plot_data(trace, result)
        figures = make_plots(data)
        notes = [note] if (note := counts_note(trace)) else []
    except Exception as error:  # a data page that only Spark's reader found broken
        raise _trace_error(error, sources) from error
    return result, rows, data, figures, notes


def _by_tasks(
    spark: SparkSession,
    sources: list[TraceSource],
    out: Path,
    step: Step,
    done: dict[str, dict[str, bytes]] | None = None,
) -> Parts:
    """The metrics with every run analysed in one Spark task (:func:`compute_in_tasks`), one
    Spark job where the plan runs fifteen queries, written."""
    runs = read_table(sources, "runs")
    step("metrics in tasks")
    try:
        tables = compute_in_tasks(spark, sources, runs, done)
    except Exception as error:  # a data page that only the task's reader found broken
        raise _trace_error(error, sources) from error
    out.mkdir(parents=True, exist_ok=True)
    step("writing metrics")
    write_arrow_tables(tables, out)
    written = {
        name: spark.read.schema(spark_schema_of(tables[name].schema)).parquet(
            str(out / "metrics" / name)
        )
        for name in WRITTEN
    }
    result = Metrics(**written, first=None, degrees=None)
    rows = sorted(
        ({k: _clean(v) for k, v in row.items()} for row in tables["runs"].to_pylist()),
        key=lambda row: (row["stack"], row["run_id"]),
    )
    step("plot data")
    data = plot_data_of_tables(tables, runs, read_table(sources, "faults"))
    figures = make_plots(data)
    counted = [r["run_id"] for r in runs.to_pylist() if r["messages_mode"] == "counts"]
    notes = [note] if (note := counts_note_of(counted)) else []
    return result, rows, data, figures, notes


def _finish(
    sources: list[TraceSource],
    trace: Trace | None,
    result: Metrics,
    rows: list[dict[str, Any]],
    data: dict[str, Any],
    figures: dict[str, go.Figure],
    notes: list[tuple[str, str]],
    out: Path,
    *,
    title: str | None,
    report: bool,
    static: bool,
    step: Step,
) -> Analysis:
    """``summary.json`` and the report of an analysis's results."""
    from pubmesh.analysis.report import charts_of, run_headline, write_report

    (out / "summary.json").write_text(
        json.dumps(
            {"sources": [str(s.root) for s in sources], "runs": rows}, indent=2, sort_keys=True
        )
        + "\n"
    )
    step("report")
    if report:
        write_report(
            out / "report.html",
            title or "pubmesh analyze: " + ", ".join(str(s.root) for s in sources),
            rows,
            charts_of(figures),
            notes,
            static=static,
            headline=run_headline(rows, data["fault_summaries"], data["labels"]),
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
