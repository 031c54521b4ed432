"""Reports: a self-contained ``report.html`` and rich tables.

A report is one HTML file that opens offline. Its charts are Plotly figures
(:mod:`pubmesh.analysis.charts`) with the Plotly bundle inlined once: hover, legend toggling,
zoom, and a PNG download on every chart. ``--static`` reports draw the same figures as PNG
images instead (rendered by Kaleido in headless Chromium, embedded in the page and written to
``figures/`` next to it, for papers): no JavaScript, a smaller file, the same look.
"""

from __future__ import annotations

import base64
import html
import math
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from pubmesh import __version__
from pubmesh.errors import UserError

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: The run table's columns: (metric, heading, format).
RUN_TABLE: list[tuple[str, str, str]] = [
    ("stack", "stack", "{}"),
    ("nodes", "nodes", "{:,}"),
    ("seed", "seed", "{}"),
    ("publications", "pubs", "{:,}"),
    ("reliability", "reliability", "{:.4f}"),
    ("history_reliability", "history rel.", "{:.4f}"),
    ("duplicates", "dups", "{:,}"),
    ("order_violations", "order viol.", "{:,}"),
    ("latency_p50", "lat p50 ms", "ms"),
    ("latency_p99", "lat p99 ms", "ms"),
    ("rmr_mean", "RMR", "{:.3f}"),
    ("ldh_mean", "LDH", "{:.2f}"),
    ("rmr_late", "RMR late", "{:.3f}"),
    ("ldh_late", "LDH late", "{:.2f}"),
    ("false_positive_rate", "false pos.", "{:.3f}"),
    ("control_overhead", "ctrl/node/s", "{:.2f}"),
    ("load_gini", "load Gini", "{:.3f}"),
    ("degree_max", "deg max", "{}"),
    ("degree_mean", "deg mean", "{:.2f}"),
    ("diameter", "diam", "{}"),
    ("convergence_time", "converged s", "{:.1f}"),
    ("supervisor_messages_per_subscribe", "sup/sub", "{:.2f}"),
    ("supervisor_messages_per_unsubscribe", "sup/unsub", "{:.2f}"),
    ("config_requests", "cfg req", "{:.3f}"),
    ("filter_conjunctions_mean", "conj/edge", "{:.1f}"),
    ("filter_conjunctions_max", "conj/edge max", "{}"),
    ("stalls", "stalls", "{:,}"),
    ("tagged", "tagged", "{:,}"),
    ("safety_drops", "safety drops", "{:,}"),
    ("replayed", "replayed", "{:,}"),
]


#: What each run-table column is, on one line: shown when the pointer rests on its heading.
#: docs/metrics.md has each in full, under an anchor of the column's name.
GLOSSARY: dict[str, str] = {
    "stack": "the stack that ran",
    "nodes": "nodes in the run, infrastructure included",
    "seed": "the scenario's seed: same scenario and seed, same trace",
    "publications": "publications issued in the run",
    "reliability": "delivered ÷ expected (subscriber, publication) pairs, the publisher's own "
    "0-hop delivery included",
    "history_reliability": "the share of every publication ever issued that each subscriber "
    "alive at the end got, whenever it joined (skipring's guarantee)",
    "duplicates": "deliveries beyond the first of a publication at a node",
    "order_violations": "first deliveries that came after a later publication of the same "
    "publisher",
    "latency_p50": "median publish → first delivery, over every first delivery (ms)",
    "latency_p99": "99th percentile of publish → first delivery (ms)",
    "rmr_mean": "Relative Message Redundancy: payload messages ÷ (receivers − 1) − 1, mean over "
    "publications (0: one message per receiver)",
    "ldh_mean": "Last Delivery Hop: the hops of a publication's last first delivery, mean over "
    "publications",
    "rmr_late": "RMR over the later half of the publications (the tree's steady state)",
    "ldh_late": "LDH over the later half of the publications",
    "false_positive_rate": "payload messages received by nodes that neither deliver nor "
    "forward them, ÷ payload messages received (content routing)",
    "control_overhead": "control (non-payload) messages sent per node per second",
    "load_gini": "Gini coefficient of messages in + out per node (0: all equal)",
    "degree_max": "largest overlay degree at the last snapshot",
    "degree_mean": "mean overlay degree at the last snapshot",
    "diameter": "largest diameter of a connected topic overlay at the last snapshot (hops)",
    "convergence_time": "first time from which the legitimacy predicate held for good (s)",
    "supervisor_messages_per_subscribe": "messages the skipring supervisor sent per subscribe",
    "supervisor_messages_per_unsubscribe": "messages the skipring supervisor sent per unsubscribe",
    "config_requests": "skipring ConfigurationRequests per topic per timeout interval once stable",
    "filter_conjunctions_mean": "chord: subscription conjunctions routed per out-edge, mean",
    "filter_conjunctions_max": "chord: subscription conjunctions on the fullest out-edge",
    "stalls": "brokertree: times a queued copy waited behind a link it could not yet take",
    "tagged": "brokertree: deliveries tagged while a subscription was partly set up",
    "safety_drops": "brokertree: copies a client dropped as already delivered (exactly-once)",
    "replayed": "publications handed to late subscribers from the topic's history",
}


#: the anchor of a column in docs/metrics.md where it differs from the column's name (names
#: that are also a section's heading there)
ANCHORS = {"nodes": "runs-nodes", "publications": "runs-publications"}


def fmt(value: Any, pattern: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if pattern == "ms":
        return f"{value * 1000:.1f}"
    try:
        return pattern.format(value)
    except (ValueError, TypeError):
        return str(value)


def present_columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The run-table columns with a value in at least one row, plus the extra metrics that the
    specs of the rows' stacks declare (so a self-stabilizing run that never converged shows
    "–" for its convergence time rather than no column at all)."""
    from pubmesh.stacks.base import available_stacks, get_stack

    stacks = {r.get("stack") for r in rows}
    declared = {
        metric
        for name in available_stacks()
        if name in stacks
        for metric in get_stack(name).extra_metrics
    }
    return [c for c in RUN_TABLE if c[0] in declared or any(r.get(c[0]) is not None for r in rows)]


def _ms(seconds: Any) -> str:
    return "–" if seconds is None else f"{seconds * 1000:,.0f} ms"


def run_headline(
    rows: Sequence[dict[str, Any]], faults: dict[str, str], labels: dict[str, str]
) -> str:
    """The report's first sentence: what the run (or the runs) delivered, how fast and at
    what cost. ``faults``: run_id → what its faults did ("50% crashed at 40 s");
    ``labels``: run_id → its name in the legends."""
    if not rows:
        return ""

    def cost(row: dict[str, Any]) -> float | None:
        messages, delivered = row.get("messages"), row.get("delivered")
        return messages / delivered if messages and delivered else None

    if len(rows) == 1:
        row = rows[0]
        fault = faults.get(str(row.get("run_id")), "")
        head = f"{row.get('nodes') or 0:,} {row.get('stack')} nodes" + (
            f", {fault}" if fault else ""
        )
        if row.get("reliability") is None:
            count = row.get("publications") or 0
            return f"{head}: no subscriber expected any of its {count:,} publications."
        per = cost(row)
        return (
            f"{head}: {row['reliability']:.2%} of the expected deliveries made, latency p50 "
            f"{_ms(row.get('latency_p50'))} (p99 {_ms(row.get('latency_p99'))})"
            + (f", {per:,.1f} messages per delivery" if per is not None else "")
            + "."
        )
    stacks = sorted({str(r.get("stack")) for r in rows})
    rated = [r for r in rows if r.get("reliability") is not None]
    head = f"{len(rows)} runs ({', '.join(stacks)})"
    if not rated:
        return f"{head}: no subscriber expected any publication."
    low = min(rated, key=lambda r: r["reliability"])
    high = max(rated, key=lambda r: r["reliability"])
    p50 = [r["latency_p50"] for r in rated if r.get("latency_p50") is not None]
    costs = [c for c in (cost(r) for r in rated) if c is not None]
    name = labels.get(str(low.get("run_id")), str(low.get("run_id")))
    fault = faults.get(str(low.get("run_id")), "")
    text = f"{head}: reliability from {low['reliability']:.2%} ({name}" + (
        f", {fault})" if fault else ")"
    )
    text += f" to {high['reliability']:.2%}"
    if p50:
        text += f", latency p50 {_ms(min(p50))} to {_ms(max(p50))}"
    if costs:
        text += f", {min(costs):,.1f} to {max(costs):,.1f} messages per delivery"
    return text + "."


#: Terminal tables fit this many columns (a terminal of 100 columns shows them whole).
TERMINAL_WIDTH = 100
#: A column of a terminal table is at most this wide; longer headings wrap (never cut).
COLUMN_MAX = 16


def fitted_tables(
    title: str,
    corner: str,
    labels: Sequence[str],
    columns: Sequence[tuple[str, Sequence[str]]],
    width: int = TERMINAL_WIDTH,
    most: int | None = COLUMN_MAX,
) -> list[Table]:
    """A table with a row per label and a column per (heading, cells), split into as many
    tables as it takes for each to fit ``width`` columns: headings and cells wrap (a column
    at most ``most`` wide; None: as wide as its heading), nothing is cut to "…". Cells may
    hold two lines (a mean over its spread)."""

    def longest(text: str) -> int:
        return max((len(line) for line in text.splitlines()), default=0)

    def words(text: str) -> int:
        return max((len(word) for word in text.split()), default=0)

    left = min(max([len(corner), *(longest(label) for label in labels)]), 28)

    def size(head: str, cells: Sequence[str]) -> int:
        wide = max(1, len(head), *(longest(c) for c in cells))
        if most is None:
            return wide
        # a heading wraps at its spaces only where it must
        shown = len(head) if len(head) <= most else words(head)
        return min(max(1, shown, *(longest(c) for c in cells)), most)

    sizes = [size(head, cells) for head, cells in columns]

    def split(pad: int) -> list[list[int]]:
        # a column takes its width, its padding and a border: "│ 0.998 "
        chunks: list[list[int]] = []
        used = 1 + left + pad + 1
        for index, needed in enumerate(sizes):
            if not chunks or used + needed + pad + 1 > width:
                chunks.append([])
                used = 1 + left + pad + 1
            chunks[-1].append(index)
            used += needed + pad + 1
        return chunks

    # a space either side of a cell where that costs no second table, else on its left only
    pad = 2 if len(split(2)) <= len(split(1)) else 1
    chunks = split(pad)
    tables = []
    for number, chunk in enumerate(chunks or [[]], start=1):
        part = f" ({number}/{len(chunks)})" if len(chunks) > 1 else ""
        table = Table(title=title + part, padding=(0, pad - 1, 0, 1))
        table.add_column(corner, width=left, overflow="fold")
        for index in chunk:
            heading = wrap_name(columns[index][0], sizes[index])
            table.add_column(heading, justify="right", width=sizes[index], overflow="fold")
        for row, label in enumerate(labels):
            table.add_row(label, *(columns[index][1][row] for index in chunk))
        tables.append(table)
    return tables


def wrap_name(name: str, width: int) -> str:
    """A long name (a run id) in lines of at most ``width``, broken after its "-" and "_"
    where it can be (``paper004_fail50-`` / ``gossip-s1``), else anywhere."""
    if len(name) <= width:
        return name
    lines = [""]
    for piece in re.findall(r"[^-_]*[-_]?", name):
        while len(piece) > width:  # no joint to break at: fold
            if lines[-1]:
                lines.append("")
            lines[-1], piece = piece[:width], piece[width:]
            lines.append("")
        if len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(line for line in lines if line)


def print_runs(rows: Sequence[dict[str, Any]], title: str, console: Console | None = None) -> None:
    """A row per metric and a column per run, headed by its whole id where the runs fit
    :data:`TERMINAL_WIDTH` columns so, else by its name without the id's hash, wrapped, in
    as many tables of that width as it takes."""
    from pubmesh.analysis.job import run_labels

    console = console or Console()
    columns = present_columns(rows)
    labels = [h for _, h, _ in columns]
    values = [[fmt(row.get(key), pattern) for key, _, pattern in columns] for row in rows]
    ids = [str(row["run_id"]) for row in rows]
    tables = fitted_tables(title, "metric", labels, list(zip(ids, values, strict=True)), most=None)
    if len(tables) > 1:
        names = run_labels(ids)  # without their hashes
        cells = [(names[run_id], v) for run_id, v in zip(ids, values, strict=True)]
        tables = fitted_tables(title, "metric", labels, cells, most=None)
        if len(tables) > 1:
            tables = fitted_tables(title, "metric", labels, cells)
    for table in tables:
        console.print(table)


def html_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]], first: str = "run_id"
) -> str:
    head = "".join(
        f"<th title='{html.escape(GLOSSARY.get(k, k))} (docs/metrics.md#{ANCHORS.get(k, k)})'>"
        f"{html.escape(h)}</th>"
        for k, h, _ in columns
    )
    body = []
    for row in rows:
        cells = "".join(f"<td>{html.escape(fmt(row.get(k), p))}</td>" for k, _, p in columns)
        body.append(f"<tr><th>{html.escape(str(row.get(first, '')))}</th>{cells}</tr>")
    return (
        f"<div class='scroll'><table><thead><tr><th>{html.escape(first)}</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }
thead th { background: #f2f2f2; } tbody th { text-align: left; font-weight: normal; }
figure { margin: 0; } figure img { max-width: 100%; }
p.note { font-size: 0.85em; color: #555; }
p.headline { font-size: 1.1em; line-height: 1.5; max-width: 60em; }
.scroll { overflow-x: auto; max-width: 100%; }
table.points td small { color: #666; } table.points th { vertical-align: bottom; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 8px; }
@media (max-width: 1100px) { .charts { grid-template-columns: minmax(0, 1fr); } }
details > summary { cursor: pointer; font-size: 1.15em; font-weight: bold; margin: 1.2em 0 0.4em; }
"""

# A chart drawn while its <details> was closed has no width; size it when it opens.
RESIZE_ON_OPEN = """<script>
document.querySelectorAll("details").forEach(function (d) {
  d.addEventListener("toggle", function () {
    if (d.open && window.Plotly) {
      d.querySelectorAll(".plotly-graph-div").forEach(function (g) { Plotly.Plots.resize(g); });
    }
  });
});
</script>"""

HOW_TO_READ = (
    "<p class='note'>Hover a chart for run and value; click a legend entry to hide it "
    "(double-click to show it alone); drag to zoom, double-click to zoom out; the camera icon "
    "saves a PNG.</p>"
)

#: Above this many runs the run table starts collapsed (a sweep's or the demo's).
COLLAPSE_RUNS_ABOVE = 6
#: PNG size of a --static chart: CSS pixels, drawn at twice the resolution for print
STATIC_WIDTH, STATIC_SCALE = 760, 2
CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


@dataclass(frozen=True)
class Chart:
    """One chart of a report: a Plotly figure, placed under a deterministic element id."""

    element_id: str
    figure: go.Figure
    caption: str = ""


#: A report section: (heading, content), the content HTML or HTML interleaved with charts.
Section = tuple[str, "str | Sequence[str | Chart]"]


def chart_id(caption: str, prefix: str = "fig") -> str:
    """A stable element id (and PNG file name) from a caption: "fig-latency-cdf"."""
    return f"{prefix}-" + (re.sub(r"[^a-z0-9]+", "-", caption.lower()).strip("-") or "chart")


def charts_of(figures: dict[str, go.Figure], prefix: str = "fig") -> list[Chart]:
    """Captioned figures as charts with unique ids (two captions may slug alike)."""
    out: list[Chart] = []
    used: set[str] = set()
    for caption, figure in figures.items():
        base = element_id = chart_id(caption, prefix)
        index = 2
        while element_id in used:
            element_id, index = f"{base}-{index}", index + 1
        used.add(element_id)
        out.append(Chart(element_id, figure, caption))
    return out


def chromium_path() -> str:
    """The browser Kaleido draws static charts with, or one line saying how to get one."""
    given = os.environ.get("BROWSER_PATH")
    if given and Path(given).exists():
        return given
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    raise UserError(
        "--static draws the charts as PNG in headless Chromium and none was found on PATH; "
        "install it (Debian: apt-get install chromium, or `make chromium`) or drop --static"
    )


def render_static(charts: Sequence[Chart], directory: Path) -> dict[str, bytes]:
    """Every chart as PNG bytes, rendered in one Chromium session (a child process with a
    deadline: :mod:`pubmesh.analysis.draw`) and written to ``directory/<element id>.png``."""
    if not charts:
        return {}
    from pubmesh.analysis.draw import DrawError, draw

    browser = chromium_path()
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{chart.element_id}.png" for chart in charts]
    figures = [chart.figure.to_json() for chart in charts]
    try:
        draw(figures, paths, STATIC_WIDTH, STATIC_SCALE, browser)
    except DrawError as error:  # Kaleido or Chromium failed: one line, not a traceback
        raise UserError(f"--static: Chromium could not draw the charts ({error})") from None
    return {chart.element_id: path.read_bytes() for chart, path in zip(charts, paths, strict=True)}


def _charts_in(sections: Sequence[Section]) -> list[Chart]:
    return [
        part
        for _, content in sections
        if not isinstance(content, str)
        for part in content
        if isinstance(part, Chart)
    ]


def _place(chart: Chart, pngs: dict[str, bytes] | None) -> str:
    if pngs is None:
        from pubmesh.analysis.charts import div

        return div(chart.figure, chart.element_id)
    data = base64.b64encode(pngs[chart.element_id]).decode("ascii")
    alt = html.escape(chart.caption or chart.element_id)
    return (
        f"<figure class='chart' id='{chart.element_id}'><img alt='{alt}' "
        f"src='data:image/png;base64,{data}'></figure>"
    )


def write_report(
    path: Path,
    title: str,
    rows: Sequence[dict[str, Any]],
    figures: Sequence[Chart],
    sections: Sequence[Section] = (),
    *,
    static: bool = False,
    headline: str | None = None,
) -> None:
    """Write a self-contained HTML report: ``headline`` (the sentence that answers the
    report's question, :func:`run_headline`), ``sections`` (heading, content), then the run
    table and ``figures``. Interactive unless ``static`` (PNG charts, also written to
    ``figures/`` beside the report). When the sections have charts of their own (the demo's
    comparison), the figures below them start collapsed: the charts above answer first."""
    leading = _charts_in(sections)
    everything = [*leading, *figures]
    pngs = render_static(everything, path.parent / "figures") if static else None
    script = ""
    if everything and not static:  # the Plotly bundle once, inlined: the file opens offline
        from pubmesh.analysis.charts import plotly_js

        script = f"<script>{plotly_js()}</script>"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style>{script}</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *([f"<p class='headline'>{html.escape(headline)}</p>"] if headline else []),
        f"<p class='note'>pubmesh {__version__}. Rest the pointer on a column's heading for "
        "what it measures; docs/metrics.md defines every metric (reliability counts a "
        "(subscriber, publication) pair when the subscription and the subscriber's life cover "
        "the publish time to the end of the run, the publisher's own delivery included).</p>",
    ]
    for heading, content in sections:
        body = content if isinstance(content, str) else "".join(
            part if isinstance(part, str) else _place(part, pngs) for part in content
        )  # fmt: skip
        parts.append(f"<h2>{html.escape(heading)}</h2>{body}")
    ordered = sorted(rows, key=lambda r: (str(r.get("stack")), r.get("nodes") or 0,
                                          r.get("seed") or 0, str(r.get("run_id"))))  # fmt: skip
    runs = html_table(ordered, present_columns(ordered))
    if len(rows) > COLLAPSE_RUNS_ABOVE:
        parts.append(f"<details><summary>Runs ({len(rows)})</summary>{runs}</details>")
    else:
        parts.append(f"<h2>Runs</h2>{runs}")
    if figures:
        grid = "<div class='charts'>" + "".join(_place(c, pngs) for c in figures) + "</div>"
        if not static:
            grid = HOW_TO_READ + grid
        if leading:
            parts.append(
                f"<details><summary>All plots ({len(figures)}: every metric against every "
                f"swept parameter, and the runs' distributions)</summary>{grid}</details>"
            )
        else:
            parts.append(f"<h2>Plots</h2>{grid}")
    if not static:
        parts.append(RESIZE_ON_OPEN)
    else:
        parts.append(
            "<p class='note'>Static report: every chart is also a PNG in <code>figures/</code> "
            "beside this file.</p>"
        )
    parts.append("</body></html>\n")
    path.write_text("".join(parts), encoding="utf-8")
