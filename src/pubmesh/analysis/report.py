"""Reports: a self-contained ``report.html`` (plots inlined as PNG) and rich tables."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pubmesh import __version__

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
]


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


#: Up to this many runs print as columns (one row per metric), which fits a terminal.
TRANSPOSE_UP_TO = 6


def print_runs(rows: Sequence[dict[str, Any]], title: str, console: Console | None = None) -> None:
    console = console or Console()
    columns = present_columns(rows)
    table = Table(title=title)
    if len(rows) <= TRANSPOSE_UP_TO:
        table.add_column("metric")
        for row in rows:
            table.add_column(str(row["run_id"]), justify="right", overflow="fold")
        for key, heading, pattern in columns:
            table.add_row(heading, *(fmt(row.get(key), pattern) for row in rows))
    else:
        table.add_column("run", overflow="fold")
        for _, heading, _ in columns:
            table.add_column(heading, justify="right")
        for row in rows:
            table.add_row(row["run_id"], *(fmt(row.get(k), p) for k, _, p in columns))
    console.print(table)


def html_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]], first: str = "run_id"
) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
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
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; } figcaption { font-size: 0.85em; color: #555; }
p.note { font-size: 0.85em; color: #555; }
p.headline { font-size: 1.1em; line-height: 1.5; max-width: 60em; }
.scroll { overflow-x: auto; max-width: 100%; }
.charts { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 8px; }
@media (max-width: 1100px) { .charts { grid-template-columns: minmax(0, 1fr); } }
details > summary { cursor: pointer; font-size: 1.15em; font-weight: bold; margin: 1.2em 0 0.4em; }
"""

#: Above this many runs the run table starts collapsed (a sweep's or the demo's).
COLLAPSE_RUNS_ABOVE = 6


def write_report(
    path: Path,
    title: str,
    rows: Sequence[dict[str, Any]],
    figures: dict[str, bytes],
    sections: Sequence[tuple[str, str]] = (),
) -> None:
    """Write a self-contained HTML report: ``sections`` (heading, HTML) first, then the run
    table and the plots."""
    interactive = any("plotly-graph-div" in content for _, content in sections)
    script = ""
    if interactive:  # the Plotly bundle once, inlined: the file opens offline
        from pubmesh.analysis.charts import plotly_js

        script = f"<script>{plotly_js()}</script>"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style>{script}</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='note'>pubmesh {__version__}. Metric names and definitions: DESIGN.md "
        "(reliability counts a (subscriber, publication) pair when the subscription and the "
        "subscriber's life cover the publish time to the end of the run).</p>",
    ]
    for heading, content in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>{content}")
    ordered = sorted(rows, key=lambda r: (str(r.get("stack")), r.get("nodes") or 0,
                                          r.get("seed") or 0, str(r.get("run_id"))))  # fmt: skip
    runs = html_table(ordered, present_columns(ordered))
    if len(rows) > COLLAPSE_RUNS_ABOVE:
        parts.append(f"<details><summary>Runs ({len(rows)})</summary>{runs}</details>")
    else:
        parts.append(f"<h2>Runs</h2>{runs}")
    if figures:
        if interactive:  # the charts above answer first; the rest on request
            parts.append(
                f"<details><summary>All plots ({len(figures)}: every metric against every "
                "swept parameter, and the runs' distributions)</summary>"
            )
        else:
            parts.append("<h2>Plots</h2>")
        parts.append("<div class='plots'>")
        for caption, png in figures.items():
            data = base64.b64encode(png).decode("ascii")
            parts.append(
                f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
        parts.append("</div></details>" if interactive else "</div>")
    parts.append("</body></html>\n")
    path.write_text("".join(parts), encoding="utf-8")
