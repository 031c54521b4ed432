"""The stack comparison that opens the demo report: *which stack delivers what, at what cost,
under how much failure?*

From the demo sweep (every stack × failed fraction × seeds) it builds, in this order:

1. one sentence naming the most reliable stack under 50% failures and what it costs;
2. a headline table per stack × failed fraction: reliability, latency p50/p99, RMR, LDH,
   control messages per delivery, degree, convergence time where the stack has it;
3. interactive figures (:mod:`pubmesh.analysis.charts`): reliability against failed fraction,
   message cost per delivered publication by role, latency CDFs per failed fraction,
   reliability over time with the faults marked, degree distribution, convergence.

Everything is computed from the per-run metrics and the small plot frames the sweep's one
Spark analysis already produced (:attr:`pubmesh.analysis.job.Analysis.data`).
"""

from __future__ import annotations

import html
from typing import Any

from pubmesh.analysis import charts
from pubmesh.analysis.report import Chart, Section, html_table

#: The failed fraction the headline sentence is about: the most reliable stack under 50%
#: failures.
HEADLINE_FRACTION = 0.5

HEADLINE_COLUMNS: list[tuple[str, str, str]] = [
    ("failed", "failed", "{}"),
    ("runs", "runs", "{}"),
    ("reliability_mean", "reliability", "{:.4f}"),
    ("latency_p50_mean", "latency p50 (ms)", "ms"),
    ("latency_p99_mean", "latency p99 (ms)", "ms"),
    ("rmr_mean_mean", "RMR", "{:.2f}"),
    ("ldh_mean_mean", "LDH (hops)", "{:.2f}"),
    ("control_per_delivery", "control msgs / delivery", "{:.2f}"),
    ("degree_mean_mean", "degree", "{:.2f}"),
    ("convergence_time_mean", "converged (s)", "{:.1f}"),
]
AVERAGED = ["reliability", "latency_p50", "latency_p99", "rmr_mean", "ldh_mean", "degree_mean",
            "convergence_time"]  # fmt: skip


def run_meta(sweep: Any, parameter: str = "faults.0.fraction") -> Any:
    """run_id, stack, seed, fraction for every run of the sweep that completed."""
    import pandas as pd

    stacks = {r["run_id"]: r for r in sweep.analysis.rows}
    rows = []
    for result in sweep.results:
        if not result.get("ok") or result["run_id"] not in stacks:
            continue
        values = dict(sweep.grid.tasks[result["index"]].values)
        row = stacks[result["run_id"]]
        rows.append((result["run_id"], row["stack"], row["seed"], float(values[parameter])))
    return pd.DataFrame(rows, columns=["run_id", "stack", "seed", "fraction"])


def points(sweep: Any, meta: Any, paper_rows: list[dict[str, Any]]) -> Any:
    """Per (stack, fraction): the run count, mean and sd of the headline metrics, and the
    message cost per delivered publication by role (from the demo's Tables 1-3 totals)."""
    import pandas as pd

    runs = pd.DataFrame(sweep.analysis.rows).merge(meta[["run_id", "fraction"]], on="run_id")
    for metric in AVERAGED:
        if metric not in runs:
            runs[metric] = None
        runs[metric] = pd.to_numeric(runs[metric], errors="coerce")
    grouped = runs.groupby(["stack", "fraction"])
    table = grouped.size().rename("runs").reset_index()
    for metric in AVERAGED:
        stats = grouped[metric].agg(["mean", "std"]).reset_index()
        stats = stats.rename(columns={"mean": f"{metric}_mean", "std": f"{metric}_std"})
        table = table.merge(stats, on=["stack", "fraction"])
    costs = []
    for r in paper_rows:
        received = r.get("received") or 0
        per = {role: (r.get(key) or 0) / received if received else None
               for role, key in (("payload", "eager"), ("repair", "lazy"),
                                 ("maintenance", "membership"))}  # fmt: skip
        control = None if not received else per["repair"] + per["maintenance"]  # type: ignore[operator]
        costs.append({"stack": r["stack"], "fraction": float(r["fraction"]), **per,
                      "control_per_delivery": control})  # fmt: skip
    table = table.merge(pd.DataFrame(costs), on=["stack", "fraction"], how="left")
    return table.sort_values(["stack", "fraction"]).reset_index(drop=True)


def headline(table: Any) -> str:
    """One sentence: which stacks are most reliable under 50% failures (within 0.1 point of the
    best), the cheapest of them and what it costs, and the least reliable stack."""
    at = table[(table["fraction"] - HEADLINE_FRACTION).abs() < 1e-9].dropna(
        subset=["reliability_mean"]
    )
    if not len(at):
        return "<p class='headline'>No run with 50% of the nodes failed completed.</p>"
    cost = at["control_per_delivery"].fillna(float("inf")) + at["payload"].fillna(0)
    at = at.assign(cost=cost).sort_values(["reliability_mean", "cost"], ascending=[False, True])
    top = at["reliability_mean"].max()
    best = at[at["reliability_mean"] >= top - 0.001].sort_values(["cost", "stack"])
    chosen = best.iloc[0]
    sentence = (
        f"With {HEADLINE_FRACTION:.0%} of the nodes failed, {_name(chosen['stack'])} "
        f"delivered {chosen['reliability_mean']:.2%} of the expected publications"
        f"{_cost(chosen)}"
    )
    others = [r for _, r in best.iloc[1:].iterrows()]
    if others:
        tied = ", ".join(f"{_name(r['stack'])} {r['reliability_mean']:.2%}" for r in others)
        sentence += f": the cheapest of the most reliable stacks there ({tied})."
    else:
        sentence += ": the most reliable stack there."
    worst = at.iloc[-1]
    if worst["stack"] not in set(best["stack"]):
        sentence += (
            f" The least reliable is {_name(worst['stack'])} ({worst['reliability_mean']:.2%})."
        )
    return f"<p class='headline'>{sentence}</p>"


def _name(stack: str) -> str:
    return f"<b style='color:{charts.stack_colour(stack)}'>{html.escape(stack)}</b>"


def _cost(row: Any) -> str:
    import pandas as pd

    parts = []
    if pd.notna(row.get("payload")):
        parts.append(f"{row['payload'] + (row['control_per_delivery'] or 0):.1f} messages")
    if pd.notna(row.get("latency_p50_mean")):
        parts.append(f"p50 latency {row['latency_p50_mean'] * 1000:.0f} ms")
    return f" at {' and '.join(parts)} per delivery" if parts else ""


def figures(sweep: Any, meta: Any, table: Any) -> list[Chart]:
    """The comparison's charts in reading order."""
    import pandas as pd

    data = sweep.analysis.data
    out: list[tuple[str, str]] = []
    out.append(("reliability", charts.reliability_against_failures(table)))
    cost = table.dropna(subset=["payload"])
    if len(cost):
        out.append(("cost", charts.cost_per_delivery(cost)))
    if "cdf" in data:
        cdf = data["cdf"].merge(meta, on="run_id")
        out.append(("latency", charts.latency_cdfs(cdf)))
    if "buckets" in data:
        chosen = _one_run_per_stack(meta, HEADLINE_FRACTION)
        buckets = data["buckets"].merge(chosen, on="run_id")
        faults = data["faults"][data["faults"]["run_id"].isin(chosen["run_id"])]
        if len(buckets):
            out.append((
                "over-time",
                charts.reliability_over_time(
                    buckets, faults, data["bucket_seconds"],
                    f"Reliability by publish time, {HEADLINE_FRACTION:.0%} failed "
                    "(first seed; faults dashed)",
                ),
            ))  # fmt: skip
    if "degrees" in data:
        clean = _one_run_per_stack(meta, 0.0)
        degrees = data["degrees"].merge(clean, on="run_id")
        if len(degrees):
            degrees["share"] = degrees["count"] / degrees.groupby("stack")["count"].transform("sum")
            out.append(("degree", charts.degree_distribution(degrees)))
    converged = table.dropna(subset=["convergence_time_mean"])
    if len(converged):
        converged = converged.assign(
            convergence_time_std=pd.to_numeric(converged["convergence_time_std"])
        )
        out.append((
            "convergence",
            charts.metric_by_stack(
                converged, "convergence_time", "time to a legitimate state (s)",
                "Convergence of the self-stabilizing stacks (mean ± sd over seeds)",
            ),
        ))  # fmt: skip
    return [Chart(f"compare-{name}", fig, name) for name, fig in out]


def _one_run_per_stack(meta: Any, fraction: float) -> Any:
    at = meta[(meta["fraction"] - fraction).abs() < 1e-9].sort_values(["stack", "seed"])
    return at.groupby("stack").head(1)[["run_id", "stack", "seed"]]


def section(sweep: Any, paper_rows: list[dict[str, Any]]) -> Section:
    """The report's first section: (heading, HTML and charts)."""
    meta = run_meta(sweep)
    table = points(sweep, meta, paper_rows)
    shown = table.assign(failed=[f"{f:.0%}" for f in table["fraction"]]).to_dict("records")
    parts: list[str | Chart] = [
        headline(table),
        "<div class='charts'>",
        *figures(sweep, meta, table),
        "</div>",
        "<h3>Per stack and failed fraction (mean over seeds)</h3>",
        html_table(shown, HEADLINE_COLUMNS, first="stack"),
        "<p class='note'>control msgs / delivery: repair and maintenance messages (the stack's "
        "spec gives each message its role) per delivered publication; RMR and LDH as in "
        "Henriques & Pamplona §4; latency from publish to first delivery."
        + (
            ""
            if sweep.static
            else " Hover a chart for run, seed and value; click a legend entry to hide a "
            "stack; drag to zoom; the camera icon saves a PNG."
        )
        + "</p>",
    ]
    return "Which stack delivers what, at what cost, under how much failure?", parts
