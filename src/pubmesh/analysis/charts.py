"""Interactive charts for the reports: Plotly, its JavaScript bundle inlined once per page.

Why Plotly: the Python package carries ``plotly.min.js`` (~4.8 MB), so a report stays one
self-contained file that opens offline, with hover (run, seed, value), legend toggling and
zoom built in, and a PNG download button on every chart (the mode bar's camera) for papers.
Vega-Lite through Altair would need ``vl-convert`` or three bundles inlined by hand for the
same. ``--static`` reports draw these same figures as PNG through Kaleido (plotly's image
export, which drives a headless Chromium): one look for both, and no second plotting library.

Every function takes small pandas frames Spark has already aggregated and returns a
:class:`go.Figure`; :func:`div` renders one into the page with a deterministic element id (the
same analysis writes the same report). Each stack has one colour in every figure
(:func:`stack_colour`).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pubmesh.stacks.base import get_stack

#: colours of stacks whose spec names none (StackSpec.colour), picked by name
EXTRA_COLOURS = ["#F0E442", "#000000", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF"]
#: message roles (Henriques & Pamplona Tables 2-3 in kind): payload, repair (lazy), maintenance
ROLE_COLOURS = {"payload": "#4477AA", "repair": "#EE6677", "maintenance": "#BBBBBB"}
FAULT_COLOUR = "crimson"
#: lines that are not stacks (a sweep's other parameters): Paul Tol's "muted", no pale yellow
SERIES_COLOURS = ["#332288", "#117733", "#CC6677", "#88CCEE", "#AA4499", "#44AA99", "#999933",
                  "#882255", "#DDCC77"]  # fmt: skip

CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "toImageButtonOptions": {"format": "png", "scale": 2},
}


def stack_colour(stack: str) -> str:
    """The stack's colour across every figure: its spec's (StackSpec.colour), else a spare
    one by name (a stack the registry does not know, from an old trace)."""
    try:
        colour = get_stack(stack).colour
    except KeyError:
        colour = None
    return colour or EXTRA_COLOURS[sum(stack.encode()) % len(EXTRA_COLOURS)]


def plotly_js() -> str:
    """The Plotly bundle, to inline once in the page's head."""
    from plotly.offline import get_plotlyjs

    bundle: str = get_plotlyjs()
    return bundle


def div(fig: go.Figure, element_id: str) -> str:
    """One chart as an HTML fragment (needs :func:`plotly_js` on the page)."""
    html: str = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=element_id, config=CONFIG
    )
    return f"<div class='chart'>{html}</div>"


def _layout(fig: go.Figure, title: str, *, height: int = 360) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0, "font": {"size": 14}},
        template="plotly_white",
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        legend={"title": {"text": ""}, "itemclick": "toggle"},
        hovermode="closest",
    )
    return fig


def _panels(fractions: list[float]) -> go.Figure:
    """Small multiples: one panel per failed fraction, side by side, sharing the y axis."""
    return make_subplots(
        rows=1,
        cols=len(fractions),
        shared_yaxes=True,
        subplot_titles=[f"{f:.0%} failed" for f in fractions],
    )


def reliability_against_failures(points: Any) -> go.Figure:
    """points: stack, fraction (0..1), reliability_mean, reliability_std, runs — one line per
    stack, x = failed fraction."""
    fig = go.Figure()
    for stack in sorted(points["stack"].unique()):
        part = points[points["stack"] == stack].sort_values("fraction")
        fig.add_trace(
            go.Scatter(
                x=part["fraction"] * 100,
                y=part["reliability_mean"],
                error_y={"type": "data", "array": part["reliability_std"].fillna(0)},
                mode="lines+markers",
                name=stack,
                line={"color": stack_colour(stack), "width": 2},
                customdata=part[["runs"]].to_numpy(),
                hovertemplate=(
                    f"<b>{stack}</b><br>failed %{{x:.0f}}%<br>reliability %{{y:.4f}}"
                    "<br>mean of %{customdata[0]} runs<extra></extra>"
                ),
            )
        )
    fig.update_xaxes(title="nodes failed before publishing (%)", ticksuffix="%")
    fig.update_yaxes(title="reliability (delivered / expected)", rangemode="tozero")
    return _layout(fig, "Reliability against failed fraction, one line per stack")


def cost_per_delivery(rows: Any) -> go.Figure:
    """rows: stack, fraction, payload, repair, maintenance (messages per delivered
    publication) — stacked bars per stack, one panel per failed fraction."""
    fractions = sorted(rows["fraction"].unique())
    fig = _panels(fractions)
    for role in ("payload", "repair", "maintenance"):
        for col, fraction in enumerate(fractions, start=1):
            part = rows[rows["fraction"] == fraction].sort_values("stack")
            fig.add_trace(
                go.Bar(
                    x=part["stack"],
                    y=part[role],
                    name=role,
                    legendgroup=role,
                    showlegend=col == 1,
                    marker={"color": ROLE_COLOURS[role]},
                    hovertemplate=(
                        f"<b>%{{x}}</b>, {fraction:.0%} failed<br>{role}: "
                        "%{y:.2f} messages per delivery<extra></extra>"
                    ),
                ),
                row=1,
                col=col,
            )
    fig.update_layout(barmode="stack")
    stacks = sorted(rows["stack"].unique())
    fig.update_xaxes(tickmode="array", tickvals=stacks, tickfont={"size": 9})  # every name
    fig.update_yaxes(title="messages per delivered publication", row=1, col=1)
    return _layout(fig, "Message cost per delivered publication, by role", height=380)


def latency_cdfs(cdf: Any) -> go.Figure:
    """cdf: stack, fraction, run_id, seed, q, latency (s) — one panel per failed fraction, one
    line per run coloured by stack."""
    fractions = sorted(cdf["fraction"].unique())
    fig = _panels(fractions)
    shown: set[str] = set()
    for col, fraction in enumerate(fractions, start=1):
        part = cdf[cdf["fraction"] == fraction]
        for (stack, run_id), run in sorted(part.groupby(["stack", "run_id"]), key=lambda g: g[0]):
            run = run.sort_values("q")
            seed = int(run["seed"].iloc[0]) if "seed" in run else 0
            fig.add_trace(
                go.Scatter(
                    x=run["latency"] * 1000,
                    y=run["q"],
                    mode="lines",
                    name=stack,
                    legendgroup=stack,
                    showlegend=stack not in shown,
                    line={"color": stack_colour(stack), "width": 1.5},
                    hovertemplate=(
                        f"<b>{stack}</b> seed {seed}<br>{run_id}<br>"
                        "%{y:.0%} within %{x:.1f} ms<extra></extra>"
                    ),
                ),
                row=1,
                col=col,
            )
            shown.add(stack)
    fig.update_xaxes(type="log", dtick=1, title="ms")
    fig.update_yaxes(title="fraction of deliveries", row=1, col=1)
    return _layout(
        fig,
        "Latency CDF: publish → first delivery (ms, log scale)",
        height=380,
    )


def reliability_over_time(
    buckets: Any, faults: Any, bucket_seconds: float, title: str
) -> go.Figure:
    """buckets: stack, run_id, seed, bucket_t, reliability; faults: t, kind — a step line per
    run coloured by stack, faults as dashed vertical lines."""
    fig = go.Figure()
    shown: set[str] = set()
    for (stack, run_id), run in sorted(buckets.groupby(["stack", "run_id"]), key=lambda g: g[0]):
        run = run.sort_values("bucket_t")
        fig.add_trace(
            go.Scatter(
                x=run["bucket_t"],
                y=run["reliability"],
                mode="lines",
                line={"shape": "hv", "color": stack_colour(stack), "width": 1.5},
                name=stack,
                legendgroup=stack,
                showlegend=stack not in shown,
                hovertemplate=(
                    f"<b>{stack}</b><br>{run_id}<br>published at %{{x:.0f}} s: "
                    "reliability %{y:.3f}<extra></extra>"
                ),
            )
        )
        shown.add(stack)
    _mark_faults(fig, faults)
    fig.update_xaxes(title=f"publish time (s, buckets of {bucket_seconds:g} s)")
    fig.update_yaxes(title="reliability", range=[-0.02, 1.08])
    return _layout(fig, title)


def degree_distribution(hist: Any) -> go.Figure:
    """hist: stack, degree, share (fraction of (node, topic) pairs) — a line per stack."""
    fig = go.Figure()
    for stack in sorted(hist["stack"].unique()):
        part = hist[hist["stack"] == stack].sort_values("degree")
        fig.add_trace(
            go.Scatter(
                x=part["degree"],
                y=part["share"],
                mode="lines+markers",
                name=stack,
                line={"color": stack_colour(stack), "width": 1.5},
                marker={"size": 5},
                hovertemplate=f"<b>{stack}</b><br>degree %{{x}}: %{{y:.1%}}<extra></extra>",
            )
        )
    fig.update_xaxes(title="degree (overlay neighbours per node and topic)")
    fig.update_yaxes(title="share of nodes", tickformat=".0%", rangemode="tozero")
    return _layout(fig, "Degree distribution at the last snapshot, no failures")


def metric_by_stack(points: Any, metric: str, label: str, title: str) -> go.Figure:
    """points: stack, fraction, <metric>_mean, <metric>_std — grouped bars per failed
    fraction (used for convergence time, where only some stacks have it)."""
    fig = go.Figure()
    for stack in sorted(points["stack"].unique()):
        part = points[points["stack"] == stack].sort_values("fraction")
        fig.add_trace(
            go.Bar(
                x=[f"{f:.0%}" for f in part["fraction"]],
                y=part[f"{metric}_mean"],
                error_y={"type": "data", "array": part[f"{metric}_std"].fillna(0)},
                name=stack,
                marker={"color": stack_colour(stack)},
                hovertemplate=f"<b>{stack}</b><br>%{{x}} failed: %{{y:.3g}}<extra></extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="nodes failed before publishing")
    fig.update_yaxes(title=label)
    return _layout(fig, title)


# ---------------------------------------------------------------------------------------------
# The single-run report (`pubmesh analyze`) and the sweep's "every metric against every swept
# parameter": the same look as the comparison above, one line or bar group per run, coloured
# by the run's stack (runs of one stack differ by dash).
# ---------------------------------------------------------------------------------------------
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
#: above this many runs a chart keeps its lines but drops the legend (hover still names them)
MAX_LEGEND = 12


def _run_styles(runs: list[str], stacks: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per run: its stack's colour, and a dash that tells runs of one stack apart."""
    styles: dict[str, dict[str, Any]] = {}
    seen: dict[str, int] = {}
    for run_id in sorted(runs):
        stack = stacks.get(run_id, "")
        index = seen.get(stack, 0)
        seen[stack] = index + 1
        styles[run_id] = {
            "stack": stack,
            "color": stack_colour(stack),
            "dash": DASHES[index % len(DASHES)],
        }
    return styles


def _legend_if_few(fig: go.Figure, entries: int) -> go.Figure:
    """The legend under the plot (run ids are long; a side legend halves a grid cell's plot),
    and none above :data:`MAX_LEGEND` entries."""
    rows = (entries + 1) // 2
    fig.update_layout(
        showlegend=0 < entries <= MAX_LEGEND,
        legend={"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0, "font": {"size": 11}},
        height=380 + 18 * rows,
        margin={"l": 60, "r": 20, "t": 50, "b": 70 + 18 * rows},
    )
    return fig


def run_latency_cdf(cdf: Any, stacks: dict[str, str]) -> go.Figure:
    """cdf: run_id, q (0..1), latency (s) — one line per run."""
    fig = go.Figure()
    styles = _run_styles(list(cdf["run_id"].unique()), stacks)
    for run_id, style in styles.items():
        part = cdf[cdf["run_id"] == run_id].sort_values("q")
        fig.add_trace(
            go.Scatter(
                x=part["latency"] * 1000,
                y=part["q"],
                mode="lines",
                name=run_id,
                line={"color": style["color"], "dash": style["dash"], "width": 1.6},
                hovertemplate=(
                    f"<b>{run_id}</b> ({style['stack']})<br>"
                    "%{y:.0%} within %{x:.1f} ms<extra></extra>"
                ),
            )
        )
    fig.update_xaxes(type="log", dtick=1, title="publish → first delivery (ms, log scale)")
    fig.update_yaxes(title="fraction of deliveries", tickformat=".0%", range=[0, 1.02])
    return _legend_if_few(_layout(fig, "Latency CDF"), len(styles))


def run_reliability(
    buckets: Any, faults: Any, bucket_seconds: float, stacks: dict[str, str]
) -> go.Figure:
    """buckets: run_id, bucket_t, reliability; faults: run_id, t, kind — a step line per run,
    each fault a dashed vertical line labelled with its kind."""
    fig = go.Figure()
    styles = _run_styles(list(buckets["run_id"].unique()), stacks)
    for run_id, style in styles.items():
        part = buckets[buckets["run_id"] == run_id].sort_values("bucket_t")
        fig.add_trace(
            go.Scatter(
                x=part["bucket_t"],
                y=part["reliability"],
                mode="lines",
                name=run_id,
                line={"shape": "hv", "color": style["color"], "dash": style["dash"]},
                hovertemplate=(
                    f"<b>{run_id}</b><br>published at %{{x:.0f}} s: "
                    "reliability %{y:.3f}<extra></extra>"
                ),
            )
        )
    _mark_faults(fig, faults)
    fig.update_xaxes(title=f"publish time (s, buckets of {bucket_seconds:g} s)")
    fig.update_yaxes(title="reliability (delivered / expected)", range=[-0.02, 1.08])
    title = "Reliability of publications by publish time (faults dashed)"
    return _legend_if_few(_layout(fig, title), len(styles))


def _mark_faults(fig: go.Figure, faults: Any) -> None:
    labelled: set[str] = set()
    for t, kind in sorted({(float(r["t"]), str(r["kind"])) for _, r in faults.iterrows()}):
        fig.add_vline(x=t, line={"color": FAULT_COLOUR, "dash": "dash", "width": 1})
        if kind not in labelled:  # one label per kind of fault, at its first occurrence
            labelled.add(kind)
            fig.add_annotation(
                x=t, y=1.05, text=kind, showarrow=False, xanchor="left",
                font={"color": FAULT_COLOUR, "size": 11},
            )  # fmt: skip


def run_histogram(
    frame: Any,
    value: str,
    weight: str,
    stacks: dict[str, str],
    *,
    title: str,
    xlabel: str,
    unit: str = "nodes",
) -> go.Figure:
    """frame: run_id, <value>, <weight> (a histogram Spark already counted) — grouped bars,
    one colour per run's stack. With one run the bars count nodes; with several, each run's
    bars are its share of its nodes, so a large run does not flatten the others."""
    fig = go.Figure()
    styles = _run_styles(list(frame["run_id"].unique()), stacks)
    shares = len(styles) > 1
    for run_id, style in styles.items():
        part = frame[frame["run_id"] == run_id].sort_values(value)
        total = float(part[weight].sum()) or 1.0
        y = part[weight] / total if shares else part[weight]
        shown = f"%{{y:.1%}} of its {unit}" if shares else f"%{{y}} {unit}"
        fig.add_trace(
            go.Bar(
                x=part[value],
                y=y,
                name=run_id,
                marker={"color": style["color"], "opacity": 0.85},
                customdata=part[[weight]].to_numpy(),
                hovertemplate=(
                    f"<b>{run_id}</b><br>{xlabel}: %{{x}}<br>{shown} "
                    "(%{customdata[0]:,})<extra></extra>"
                ),
            )
        )
    fig.update_layout(barmode="group", bargap=0.1)
    fig.update_xaxes(title=xlabel)
    if shares:
        fig.update_yaxes(title=f"share of the run's {unit}", tickformat=".0%")
    else:
        fig.update_yaxes(title=unit)
    return _legend_if_few(_layout(fig, title), len(styles))


#: message types drawn on their own in "Messages per second by type"; the rest are "other"
TOP_TYPES = len(SERIES_COLOURS)


def messages_per_second(frame: Any) -> go.Figure:
    """frame: second, type, sent (summed over the runs analysed) — a line per message type,
    each its own colour: the most sent types, the rest summed as "other"."""
    fig = go.Figure()
    totals = frame.groupby("type")["sent"].sum().sort_values(ascending=False, kind="stable")
    if len(totals) > TOP_TYPES:
        keep = set(totals.index[: TOP_TYPES - 1])
        frame = frame.assign(type=frame["type"].where(frame["type"].isin(keep), "other"))
        frame = frame.groupby(["second", "type"], as_index=False)["sent"].sum()
        types = [*sorted(keep), "other"]
    else:
        types = sorted(totals.index)
    for index, name in enumerate(types):
        part = frame[frame["type"] == name].sort_values("second")
        fig.add_trace(
            go.Scatter(
                x=part["second"],
                y=part["sent"],
                mode="lines",
                name=name,
                line={"width": 1.3, "color": SERIES_COLOURS[index % len(SERIES_COLOURS)]},
                hovertemplate=f"<b>{name}</b><br>second %{{x}}: %{{y:,}} sent<extra></extra>",
            )
        )
    fig.update_xaxes(title="time (s)")
    fig.update_yaxes(title="messages sent per second (all runs)")
    return _layout(fig, "Messages per second by type")


def metric_against(
    frame: Any, parameter: str, metric: str, series: list[str], categorical: bool
) -> go.Figure:
    """frame: <parameter>, <metric>_mean, <metric>_std, runs and the ``series`` columns — one
    line (mean ± sd over seeds) per combination of the other swept parameters."""
    fig = go.Figure()
    groups = list(frame.groupby(series)) if series else [((), frame)]
    for index, (key, part) in enumerate(groups):
        part = part.sort_values(parameter)
        keys = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{s}={k}" for s, k in zip(series, keys, strict=False)) or metric
        stack = next((str(k) for s, k in zip(series, keys, strict=False) if "stack" in s), None)
        colour = stack_colour(stack) if stack else SERIES_COLOURS[index % len(SERIES_COLOURS)]
        x = part[parameter].astype(str) if categorical else part[parameter]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=part[f"{metric}_mean"],
                error_y={"type": "data", "array": part[f"{metric}_std"].fillna(0)},
                mode="lines+markers",
                name=label,
                line={"color": colour, "width": 1.6},
                customdata=part[["runs"]].to_numpy() if "runs" in part else None,
                hovertemplate=(
                    f"<b>{label}</b><br>{parameter} = %{{x}}<br>{metric} %{{y:.4g}}"
                    + ("<br>mean of %{customdata[0]} runs" if "runs" in part else "")
                    + "<extra></extra>"
                ),
            )
        )
    values = frame[parameter]
    if not categorical and len(values) and values.min() > 0 and values.max() >= 50 * values.min():
        fig.update_xaxes(type="log")  # sizes 100 … 10,000: equal steps for equal ratios
    fig.update_xaxes(title=parameter)
    fig.update_yaxes(title=metric)
    title = f"{metric} against {parameter} (mean ± sd over seeds)"
    return _legend_if_few(_layout(fig, title, height=320), len(groups))
