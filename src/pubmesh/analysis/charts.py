"""Interactive charts for the reports: Plotly, its JavaScript bundle inlined once per page.

Why Plotly: the Python package carries ``plotly.min.js`` (~4.8 MB), so a report stays one
self-contained file that opens offline, with hover (run, seed, value), legend toggling and
zoom built in, and a PNG download button on every chart (the mode bar's camera) for papers.
Vega-Lite through Altair would need ``vl-convert`` or three bundles inlined by hand for the
same. The static PNG plots (:mod:`pubmesh.analysis.plots`) remain for ``--static`` reports.

Every function takes small pandas frames Spark has already aggregated and returns a
:class:`go.Figure`; :func:`div` renders one into the page with a deterministic element id (the
same analysis writes the same report). Each stack has one colour in every figure
(:func:`stack_colour`).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

#: One colour per stack across every figure of every report (Okabe-Ito, colour-blind safe).
STACK_COLOURS = {
    "gossip": "#0072B2",
    "skipring": "#E69F00",
    "chord": "#009E73",
    "brokertree": "#CC79A7",
    "clique": "#D55E00",
    "d2g": "#56B4E9",
    "tiny": "#999999",
}
EXTRA_COLOURS = ["#F0E442", "#000000", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF"]
#: message roles (papers/004 Tables 2-3 in kind): payload, repair (lazy), maintenance
ROLE_COLOURS = {"payload": "#4477AA", "repair": "#EE6677", "maintenance": "#BBBBBB"}
FAULT_COLOUR = "crimson"

CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "toImageButtonOptions": {"format": "png", "scale": 2},
}


def stack_colour(stack: str) -> str:
    if stack in STACK_COLOURS:
        return STACK_COLOURS[stack]
    return EXTRA_COLOURS[sum(stack.encode()) % len(EXTRA_COLOURS)]


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
        "Latency CDF: publish → first delivery (ms, log scale); drag to zoom",
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
    labelled: set[str] = set()
    for t, kind in sorted({(float(r["t"]), str(r["kind"])) for _, r in faults.iterrows()}):
        fig.add_vline(x=t, line={"color": FAULT_COLOUR, "dash": "dash", "width": 1})
        if kind not in labelled:  # one label per kind of fault, at its first occurrence
            labelled.add(kind)
            fig.add_annotation(
                x=t, y=1.05, text=kind, showarrow=False, xanchor="left",
                font={"color": FAULT_COLOUR, "size": 11},
            )  # fmt: skip
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
