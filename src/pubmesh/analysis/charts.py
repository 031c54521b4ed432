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

import itertools
import re
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
    fig.update_yaxes(title="cost (messages per delivered publication)", row=1, col=1)
    return _layout(fig, "Message cost per delivered publication, by role", height=380)


def latency_cdfs(cdf: Any) -> go.Figure:
    """cdf: stack, fraction, run_id, seed, q, latency (s) — one panel per failed fraction, one
    line per run coloured by stack."""
    fractions = sorted(cdf["fraction"].unique())
    fig = _panels(fractions)
    shown: set[str] = set()
    pairs = cdf[["run_id", "stack"]].drop_duplicates()
    styles = _run_styles(list(pairs["run_id"]), dict(zip(pairs["run_id"], pairs["stack"],
                                                         strict=True)))  # fmt: skip
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
                    line={
                        "color": styles[run_id]["color"],
                        "dash": styles[run_id]["dash"],
                        "width": 1.5,
                    },
                    hovertemplate=(
                        f"<b>{stack}</b> seed {seed}<br>{run_id}<br>"
                        "%{y:.0%} within %{x:.1f} ms<extra></extra>"
                    ),
                ),
                row=1,
                col=col,
            )
            shown.add(stack)
    fig.update_xaxes(type="log", dtick=1, title="ms (log scale)")
    fig.update_yaxes(title="deliveries made by then (share)", row=1, col=1)
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
    pairs = buckets[["run_id", "stack"]].drop_duplicates()
    styles = _run_styles(list(pairs["run_id"]), dict(zip(pairs["run_id"], pairs["stack"],
                                                         strict=True)))  # fmt: skip
    for (stack, run_id), run in sorted(buckets.groupby(["stack", "run_id"]), key=lambda g: g[0]):
        run = run.sort_values("bucket_t")
        style = styles[run_id]
        fig.add_trace(
            go.Scatter(
                x=run["bucket_t"],
                y=run["reliability"],
                mode="lines",
                line={"shape": "hv", "color": style["color"], "dash": style["dash"], "width": 1.5},
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
    fig.update_yaxes(title="reliability (delivered / expected)", range=[-0.02, 1.08])
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
    fig.update_yaxes(title="(node, topic) pairs (%)", tickformat=".0%", rangemode="tozero")
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
    fig.update_xaxes(title="nodes failed before publishing (%)")
    fig.update_yaxes(title=label)
    return _layout(fig, title)


# ---------------------------------------------------------------------------------------------
# The single-run report (`pubmesh analyze`) and the sweep's "every metric against every swept
# parameter": the same look as the comparison above, one line or bar group per run, coloured
# by the run's stack (runs of one stack differ by dash).
# ---------------------------------------------------------------------------------------------
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
#: bar fill patterns that tell runs of one stack apart in bar charts ("" is a plain fill)
PATTERNS = ("", "/", ".", "x", "\\", "+", "-", "|")
#: lightness steps (HLS) of a stack's colour for its 2nd, 3rd, … run: lighter and darker in
#: turn, so runs of one stack differ in shade as well as in dash or pattern
SHADE_STEPS = (0.0, 0.2, -0.14, 0.32, -0.24, 0.12, -0.07, 0.26)
#: above this many runs a chart keeps its lines but drops the legend (hover still names them)
MAX_LEGEND = 12


def shade(colour: str, index: int) -> str:
    """``colour`` (``#RRGGBB``) lighter or darker by the ``index``-th step of
    :data:`SHADE_STEPS` (index 0: the colour itself); a colour that is not hex is returned
    as is."""
    import colorsys

    step = SHADE_STEPS[index % len(SHADE_STEPS)]
    if index == 0 or not re.fullmatch(r"#[0-9a-fA-F]{6}", colour):
        return colour
    r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    hue, light, sat = colorsys.rgb_to_hls(r, g, b)
    light = min(0.9, max(0.08, light + step))
    r, g, b = colorsys.hls_to_rgb(hue, light, sat)
    return "#{:02X}{:02X}{:02X}".format(*(round(c * 255) for c in (r, g, b)))


def series_styles(keys: list[str], colours: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per series (in the order given): its base colour (``colours``), shaded and given a dash
    and a bar pattern of its own among the series that share that colour (runs of one stack
    are never drawn alike)."""
    styles: dict[str, dict[str, Any]] = {}
    seen: dict[str, int] = {}
    for key in keys:
        base = colours[key]
        index = seen.get(base, 0)
        seen[base] = index + 1
        styles[key] = {
            "color": shade(base, index),
            "dash": DASHES[index % len(DASHES)],
            "pattern": PATTERNS[index % len(PATTERNS)],
        }
    return styles


def _run_styles(runs: list[str], stacks: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per run: its stack's colour in a shade of its own, and a dash (lines) and a pattern
    (bars) that tell runs of one stack apart."""
    ordered = sorted(runs)
    colours = {run_id: stack_colour(stacks.get(run_id, "")) for run_id in ordered}
    styles = series_styles(ordered, colours)
    for run_id in ordered:
        styles[run_id]["stack"] = stacks.get(run_id, "")
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
    fig.update_yaxes(title="deliveries made by then (%)", tickformat=".0%", range=[0, 1.02])
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
                marker={
                    "color": style["color"],
                    "opacity": 0.85,
                    "pattern": {"shape": style["pattern"], "solidity": 0.45},
                },
                customdata=part[[weight]].to_numpy(),
                hovertemplate=(
                    f"<b>{run_id}</b><br>{xlabel}: %{{x}}<br>{shown} "
                    "(%{customdata[0]:,})<extra></extra>"
                ),
            )
        )
    fig.update_layout(barmode="group", bargap=0.1)
    fig.update_xaxes(title=xlabel)
    _fit_bars(fig, frame, value, weight, unit)
    if shares:
        fig.update_yaxes(title=f"{unit} (% of the run's)", tickformat=".0%")
    else:
        fig.update_yaxes(title=f"{unit} (count)")
    return _legend_if_few(_layout(fig, title), len(styles))


#: a bar lower than this share of a histogram's tallest is invisible: an axis that runs on to
#: such bars only (one node of a thousand with ten times the load) is cut before them
VISIBLE_BAR = 0.01


def _fit_bars(fig: go.Figure, frame: Any, value: str, weight: str, unit: str) -> None:
    """Fit a histogram's x axis to the bars one can see, and say on the chart how many
    ``unit`` lie beyond it (:data:`VISIBLE_BAR`)."""
    bars = [(float(x), float(y)) for trace in fig.data for x, y in zip(trace.x, trace.y,
                                                                       strict=True)]  # fmt: skip
    if not bars:
        return
    tallest = max(y for _, y in bars)
    seen = [x for x, y in bars if y >= VISIBLE_BAR * tallest]
    xs = sorted({x for x, _ in bars})
    width = min((b - a for a, b in itertools.pairwise(xs)), default=1.0)
    if not seen or max(seen) >= xs[-1]:
        return
    cut = max(seen) + width
    beyond = frame[frame[value].astype(float) > max(seen)]
    hidden = int(beyond[weight].sum())
    fig.update_xaxes(range=[min(xs) - width, cut], autorange=False)
    one = unit[:-1] if unit.endswith("s") and " " not in unit else unit
    fig.add_annotation(
        xref="paper", yref="paper", x=1, y=1.02, xanchor="right", yanchor="bottom",
        showarrow=False, font={"size": 10, "color": "#555"},
        text=f"axis cut at {cut:,.0f}: {hidden:,} {one if hidden == 1 else unit} beyond, "
        f"up to {xs[-1]:,.0f} "
        "(too few to see)",
    )  # fmt: skip


#: message types drawn on their own in "Messages per second by type"; the rest are "other"
TOP_TYPES = len(SERIES_COLOURS)
#: runs drawn as panels of their own in "Messages per second by type"; above, they are summed
#: (and the chart says so)
MAX_RATE_PANELS = 6
#: the rate axis turns logarithmic (and the chart says so) when its peak exceeds this many
#: times the median type's median rate: a start-up burst would flatten every other line
SPIKE_FACTOR = 20.0


def messages_per_second(frame: Any, stacks: dict[str, str] | None = None) -> go.Figure:
    """frame: [run_id,] second, type, sent — a line per message type, each its own colour: the
    most sent types, the rest summed as "other". With a ``run_id`` column each run has its own
    panel (its lines dashed as the run is in every other chart): runs are never summed, unless
    there are more than :data:`MAX_RATE_PANELS` of them (then the axis says so). A start-up
    burst that would flatten the other lines puts the rate on a log scale, with a note on the
    chart naming its peak."""
    stacks = stacks or {}
    runs = sorted(frame["run_id"].unique()) if "run_id" in frame else []
    # more runs than panels, or a frame already summed over the runs analysed (no run_id)
    summed = len(runs) > MAX_RATE_PANELS or "run_id" not in frame
    if summed or len(runs) < 2:
        frame = frame.groupby(["second", "type"], as_index=False)["sent"].sum()
        frame = frame.assign(run_id="")
        runs = [""]
    totals = frame.groupby("type")["sent"].sum().sort_values(ascending=False, kind="stable")
    if len(totals) > TOP_TYPES:
        keep = set(totals.index[: TOP_TYPES - 1])
        frame = frame.assign(type=frame["type"].where(frame["type"].isin(keep), "other"))
        frame = frame.groupby(["run_id", "second", "type"], as_index=False)["sent"].sum()
        types = [*sorted(keep), "other"]
    else:
        types = sorted(totals.index)
    colours = {name: SERIES_COLOURS[i % len(SERIES_COLOURS)] for i, name in enumerate(types)}
    styles = _run_styles(runs, stacks)
    fig = make_subplots(
        rows=len(runs), cols=1, shared_xaxes=True, vertical_spacing=0.06,
        subplot_titles=runs if len(runs) > 1 else None,
    )  # fmt: skip
    shown: set[str] = set()
    for row, run_id in enumerate(runs, start=1):
        of_run = frame[frame["run_id"] == run_id]
        # a second without a message of a type is a 0 (a gap on a log axis), not a line
        # drawn straight across it
        seconds = range(int(of_run["second"].min()), int(of_run["second"].max()) + 1)
        for name in types:
            part = of_run[of_run["type"] == name]
            if not len(part):
                continue
            sent = part.groupby("second")["sent"].sum().reindex(seconds, fill_value=0)
            where = f"{run_id}<br>" if run_id else ""
            fig.add_trace(
                go.Scatter(
                    x=list(sent.index),
                    y=list(sent.to_numpy()),
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=name not in shown,
                    line={"width": 1.3, "color": colours[name], "dash": styles[run_id]["dash"]},
                    hovertemplate=(
                        f"<b>{name}</b><br>{where}second %{{x}}: %{{y:,}} sent<extra></extra>"
                    ),
                ),
                row=row,
                col=1,
            )
            shown.add(name)
    fig.update_xaxes(title="time (s)", row=len(runs), col=1)
    per = "per second, all runs analysed" if summed else "per second"
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(title=f"messages sent ({per})", row=1, col=1)
    note = _log_if_spread(fig, frame, types)
    title = "Messages per second by type" + (", one panel per run" if len(runs) > 1 else "")
    _layout(fig, title + note, height=360 if len(runs) == 1 else 150 + 200 * len(runs))
    if len(runs) > 1:
        fig.update_layout(margin={"t": 90})
        fig.update_annotations(font={"size": 11})  # the panels' titles: the runs
    return fig


def _log_if_spread(fig: go.Figure, frame: Any, types: list[str]) -> str:
    """A log rate axis when the peak is over :data:`SPIKE_FACTOR` times a typical type's
    typical rate (a start-up burst, or types that differ by orders of magnitude, would
    flatten the other lines on a linear one): the words for the chart's title, naming the
    peak ("" when the axis stays linear)."""
    sent = frame[frame["sent"] > 0]
    if not len(sent):
        return ""
    typical = float(sent.groupby("type")["sent"].median().median())
    peak = sent.loc[sent["sent"].idxmax()]
    if typical <= 0 or float(peak["sent"]) <= SPIKE_FACTOR * typical:
        return ""
    fig.update_yaxes(type="log")
    fig.for_each_yaxis(
        lambda axis: (
            axis.update(title={"text": f"{axis.title.text} (log scale)"})
            if axis.title.text
            else None
        )
    )
    return (
        f"<br><sup>log scale: {peak['type']} peaks at {float(peak['sent']):,.0f}/s at "
        f"{float(peak['second']):g} s, a typical type sends {typical:,.0f}/s</sup>"
    )


#: a sweep's metrics on an axis: (name, unit), the unit the report's tables use (latency in
#: ms there, so here); ``scale`` multiplies the stored value into that unit
METRIC_AXES: dict[str, tuple[str, str]] = {
    "reliability": ("reliability", "delivered ÷ expected"),
    "history_reliability": ("history reliability", "delivered ÷ expected"),
    "duplicates": ("duplicates", "deliveries"),
    "latency_p50": ("latency p50", "ms"),
    "latency_p99": ("latency p99", "ms"),
    "rmr_mean": ("RMR", "redundant messages per receiver"),
    "ldh_mean": ("LDH", "hops"),
    "rmr_late": ("RMR, later half", "redundant messages per receiver"),
    "ldh_late": ("LDH, later half", "hops"),
    "false_positive_rate": ("false positives", "share of payload received"),
    "control_overhead": ("control overhead", "messages per node per s"),
    "load_gini": ("load Gini", "0 = equal load, 1 = one node"),
    "degree_max": ("degree max", "neighbours"),
    "degree_mean": ("degree mean", "neighbours"),
    "diameter": ("diameter", "hops"),
    "convergence_time": ("convergence time", "s"),
    "config_requests": ("config requests", "per topic per timeout interval"),
    "filter_conjunctions_mean": ("conjunctions per edge", "conjunctions"),
    "filter_conjunctions_max": ("conjunctions, fullest edge", "conjunctions"),
    "order_violations": ("order violations", "deliveries"),
    "stalls": ("stalls", "waits"),
    "tagged": ("tagged", "deliveries"),
    "safety_drops": ("safety drops", "copies"),
    "replayed": ("replayed", "publications"),
}
#: metrics stored in seconds and shown in ms (as in every table)
MS_METRICS = ("latency_p50", "latency_p99")
#: reliability axes span at least this much (a 0.6-point spread must not look like a cliff)
RELIABILITY_SPAN = 0.1


def metric_axis(metric: str) -> str:
    """``metric``'s axis title with its unit: "latency p50 (ms)"."""
    name, unit = METRIC_AXES.get(metric, (metric.replace("_", " "), "value"))
    return f"{name} ({unit})"


#: swept parameters as people write them, where the last part of the key is not enough
PARAMETER_NAMES = {"run.nodes": "nodes", "run.stack": "stack", "scenario": "scenario"}
#: the unit of a parameter's values, by its name (the key's last part)
PARAMETER_UNITS = {
    "nodes": "nodes", "duration": "s", "active_view": "neighbours", "passive_view": "peers",
    "fanout": "peers", "publish_rate": "per s", "publications": "publications",
    "topics": "topics", "detection_delay": "s", "loss": "probability",
}  # fmt: skip
_FAULT_FRACTION = re.compile(r"faults\.(\d+)\.fraction")


def parameter_label(key: str, keys: list[str] | None = None) -> str:
    """A grid key as people write it: ``stack.gossip.active_view`` → ``active_view``,
    ``faults.0.fraction`` → ``failed``; the last two parts where two keys of ``keys`` end
    alike (``gossip fanout``)."""
    fault = _FAULT_FRACTION.fullmatch(key)
    if fault:
        return "failed" if fault.group(1) == "0" else f"failed (fault {fault.group(1)})"
    if key in PARAMETER_NAMES:
        return PARAMETER_NAMES[key]
    parts = key.split(".")
    others = [k.split(".")[-1] for k in (keys or []) if k != key]
    if parts[-1] in others and len(parts) > 1:
        return " ".join(parts[-2:])
    return parts[-1]


def parameter_value(key: str, value: Any) -> str:
    """A swept value as people write it: a failed fraction as a percentage ("85%")."""
    if _FAULT_FRACTION.fullmatch(key):
        try:
            return f"{float(value):.0%}"
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def parameter_axis(key: str, keys: list[str] | None = None) -> str:
    """A swept parameter's axis title, with its unit where one is known."""
    if _FAULT_FRACTION.fullmatch(key):
        return f"{parameter_label(key, keys)} (% of the nodes)"
    unit = PARAMETER_UNITS.get(key.split(".")[-1])
    return parameter_label(key, keys) + (f" ({unit})" if unit else "")


def few_valued(values: Any) -> bool:
    """Whether a numeric parameter is better on a categorical axis: two values, or up to
    four whole numbers (an active view of 3 or 4 has no 3.5)."""
    distinct = sorted(set(values))
    whole = all(float(v) == int(float(v)) for v in distinct)
    return len(distinct) <= 2 or (whole and len(distinct) <= 4)


def metric_against(
    frame: Any,
    parameter: str,
    metric: str,
    series: list[str],
    categorical: bool,
    names: dict[str, str] | None = None,
) -> go.Figure:
    """frame: <parameter>, <metric>_mean, <metric>_std, runs and the ``series`` columns — one
    line (mean ± sd over seeds) per combination of the other swept parameters. ``names``:
    column → grid key (the legend and the axes name parameters as people write them:
    ``active_view = 3``); the metric in the unit of the tables (latency in ms); few values of
    a parameter on a categorical axis; a reliability axis at least :data:`RELIABILITY_SPAN`
    tall, so that a small difference does not look like a cliff."""
    names = names or {}
    keys = [names.get(c, c) for c in [parameter, *series]]
    key = names.get(parameter, parameter)
    shown = parameter_label(key, keys)
    scale = 1000.0 if metric in MS_METRICS else 1.0
    fault = _FAULT_FRACTION.fullmatch(key) is not None
    fig = go.Figure()
    groups = list(frame.groupby(series)) if series else [((), frame)]
    labels: list[str] = []
    colours: dict[str, str] = {}
    for index, (group, _) in enumerate(groups):
        values = group if isinstance(group, tuple) else (group,)
        label = (
            ", ".join(
                f"{parameter_label(names.get(s, s), keys)} = {parameter_value(names.get(s, s), v)}"
                for s, v in zip(series, values, strict=False)
            )
            or METRIC_AXES.get(metric, (metric, ""))[0]
        )
        stack = next(
            (str(v) for s, v in zip(series, values, strict=False)
             if names.get(s, s) in ("run.stack", "stack")),
            None,
        )  # fmt: skip
        labels.append(label)
        spare = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        colours[label] = stack_colour(stack) if stack else spare
    styles = series_styles(labels, colours)
    order = sorted(frame[parameter].unique())
    for label, (_, part) in zip(labels, groups, strict=True):
        part = part.sort_values(parameter)
        if categorical:
            x = [parameter_value(key, v) for v in part[parameter]]
        else:
            x = part[parameter] * (100 if fault else 1)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=part[f"{metric}_mean"] * scale,
                error_y={"type": "data", "array": part[f"{metric}_std"].fillna(0) * scale},
                mode="lines+markers",
                name=label,
                line={"color": styles[label]["color"], "dash": styles[label]["dash"], "width": 1.6},
                customdata=part[["runs"]].to_numpy() if "runs" in part else None,
                hovertemplate=(
                    f"<b>{label}</b><br>{shown} = %{{x}}<br>{metric_axis(metric)}: %{{y:.4g}}"
                    + ("<br>mean of %{customdata[0]} runs" if "runs" in part else "")
                    + "<extra></extra>"
                ),
            )
        )
    values = frame[parameter]
    if categorical:
        fig.update_xaxes(
            type="category", categoryorder="array",
            categoryarray=[parameter_value(key, v) for v in order],
        )  # fmt: skip
    elif len(values) and values.min() > 0 and values.max() >= 50 * values.min():
        fig.update_xaxes(type="log")  # sizes 100 … 10,000: equal steps for equal ratios
    elif fault:
        fig.update_xaxes(ticksuffix="%")
    fig.update_xaxes(title=parameter_axis(key, keys))
    fig.update_yaxes(title=metric_axis(metric))
    if metric in ("reliability", "history_reliability"):
        _honest_reliability_axis(fig, frame, metric)
    title = f"{METRIC_AXES.get(metric, (metric, ''))[0]} against {shown} (mean ± sd over seeds)"
    return _legend_if_few(_layout(fig, title, height=320), len(groups))


def _honest_reliability_axis(fig: go.Figure, frame: Any, metric: str) -> None:
    """A reliability axis that spans at least :data:`RELIABILITY_SPAN` below its top (1, or
    the highest value), never above 1 + a margin, and says where it starts when not at 0."""
    means = frame[f"{metric}_mean"].dropna()
    if not len(means):
        return
    spread = frame[f"{metric}_std"].fillna(0) if f"{metric}_std" in frame else 0 * means
    low = float((means - spread.reindex(means.index).fillna(0)).min())
    top = max(1.0, float(means.max()))
    bottom = max(0.0, min(low - 0.01, top - RELIABILITY_SPAN))
    fig.update_yaxes(range=[bottom, top + 0.005], autorange=False)
    if bottom > 0:
        gap = float(means.max() - means.min())
        fig.add_annotation(
            xref="paper", yref="paper", x=1, y=1.02, xanchor="right", yanchor="bottom",
            showarrow=False, font={"size": 10, "color": "#555"},
            text=f"axis from {bottom:.0%} (not 0); the points differ by {gap:.2%} at most",
        )  # fmt: skip
