"""Reports read in ten seconds (issue "first hour"): runs of one stack told apart in every
chart, per-run series never summed, a sweep's headline that says why reliability rises as
nodes fail, units and human parameter names on every axis, categorical axes for few values,
an honest reliability range, the per-point table near the top and narrow, terminal tables
within 100 columns, histograms fitted to their bars and a start-up burst clipped (and said).

The charts are built from small pandas frames as Spark hands them over; one test compares
grid points on a real (small) Spark DataFrame."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from rich.console import Console

from pubmesh.analysis import charts
from pubmesh.analysis.job import make_plots
from pubmesh.analysis.sweep import (
    SweepResult,
    column_name,
    comparison_plots,
    load_grid,
    print_comparison,
    sweep_headline,
)

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "scenarios" / "paper004_fail50.toml"
FRACTION, VIEW = "faults.0.fraction", "stack.gossip.active_view"


def _two_gossip_runs() -> dict[str, Any]:
    """plot_data's frames for two gossip runs and a chord run."""
    runs = {"g1": "gossip", "g2": "gossip", "c1": "chord"}
    cdf = pd.DataFrame(
        [(r, q, 0.01 + q / 10 + i / 100) for i, r in enumerate(runs) for q in (0.1, 0.5, 0.9)],
        columns=["run_id", "q", "latency"],
    )
    buckets = pd.DataFrame(
        [(r, t, 1.0 - i / 100) for i, r in enumerate(runs) for t in (0.0, 3.0, 6.0)],
        columns=["run_id", "bucket_t", "reliability"],
    )
    load = pd.DataFrame(
        [(r, b, 5 + i) for i, r in enumerate(runs) for b in (0.0, 10.0, 20.0)],
        columns=["run_id", "load_bin", "count"],
    )
    degrees = pd.DataFrame(
        [(r, d, 3 + i) for i, r in enumerate(runs) for d in (2, 3, 4)],
        columns=["run_id", "degree", "count"],
    )
    faults = pd.DataFrame({"run_id": ["g1"], "t": [3.0], "kind": ["crash"]})
    return {
        "stacks": runs, "labels": {r: r for r in runs}, "cdf": cdf, "buckets": buckets,
        "bucket_seconds": 3.0, "faults": faults, "load": load, "load_width": 10.0,
        "degrees": degrees,
    }  # fmt: skip


def _look(trace: Any) -> tuple[str, str]:
    """A trace's colour and its dash (lines) or fill pattern (bars)."""
    if trace.type == "bar":
        return trace.marker.color, trace.marker.pattern.shape or ""
    return trace.line.color, trace.line.dash or "solid"


def test_two_runs_of_one_stack_differ_in_shade_and_dash_in_every_chart() -> None:
    figures = make_plots(_two_gossip_runs())
    assert set(figures) >= {"Latency CDF", "Reliability by publish time", "Per-node load",
                            "Degree distribution (last snapshot)"}  # fmt: skip
    for caption, fig in figures.items():
        looks = {trace.name: _look(trace) for trace in fig.data}
        (c1, d1), (c2, d2) = looks["g1"], looks["g2"]
        assert c1 != c2 and d1 != d2, (caption, looks)
        # both shades of gossip's blue, never chord's green
        assert looks["c1"][0] == charts.stack_colour("chord"), caption
    # the demo's comparison: seeds of one stack in one panel
    cdf = pd.DataFrame(
        [(r, "gossip", s, 0.5, q, 0.02 + q / 50) for r, s in (("a", 1), ("b", 2))
         for q in (0.1, 0.5, 0.9)],
        columns=["run_id", "stack", "seed", "fraction", "q", "latency"],
    )  # fmt: skip
    lines = [_look(trace) for trace in charts.latency_cdfs(cdf).data]
    assert len(set(lines)) == 2 and len({c for c, _ in lines}) == 2, lines


def test_a_charts_per_run_series_are_separate_traces_never_summed() -> None:
    frame = pd.DataFrame(
        [(r, s, t, n * (1 + k)) for k, r in enumerate(("g1", "g2")) for s in range(4)
         for t, n in (("Gossip", 10), ("IHave", 3))],
        columns=["run_id", "second", "type", "sent"],
    )  # fmt: skip
    fig = charts.messages_per_second(frame, {"g1": "gossip", "g2": "gossip"})
    assert len(fig.data) == 4  # two types in each of two runs
    sums = sorted(sum(trace.y) for trace in fig.data)
    assert sums == [12, 24, 40, 80]  # each run's own counts, not 36 and 120 summed
    dashes = {trace.line.dash for trace in fig.data}
    assert len(dashes) == 2, dashes


def test_the_sweep_headline_says_why_reliability_rises_as_nodes_fail(tmp_path: Path) -> None:
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(f'base = "{BASE}"\n[grid]\n"{FRACTION}" = [0.0, 0.85]\n')
    grid = load_grid(grid_file)
    key = column_name(FRACTION)
    comparison = [
        {"point": 0, key: "0.0", "reliability_mean": 0.9914, "latency_p50_mean": 0.027},
        {"point": 1, key: "0.85", "reliability_mean": 1.0, "latency_p50_mean": 0.005},
    ]
    text = sweep_headline(grid, comparison, expected={0: 2890.0, 1: 340.0})
    assert (
        "Reliability rises as more nodes fail (99.14% with 0% failed, 100.00% with 85%) "
        "because it is counted over the survivors"
    ) in text, text
    assert "2,890 pairs expected per run with 0% failed, 340 with 85%" in text, text
    assert "smaller overlay is also why latency p50 falls (27 ms → 5 ms)" in text, text
    # the expected direction needs no explanation
    usual = [{**comparison[0], "reliability_mean": 1.0}, {**comparison[1], "reliability_mean": 0.9}]
    assert "rises" not in sweep_headline(grid, usual)


UNIT = re.compile(r"\(.+\)")


def test_every_axis_has_a_unit_and_latency_is_in_the_tables_ms() -> None:
    frame = pd.DataFrame(
        {VIEW: [3, 4], "latency_p50_mean": [0.0275, 0.0266], "latency_p50_std": [0.001, 0.002],
         "runs": [3, 3]}
    )  # fmt: skip
    fig = charts.metric_against(frame, VIEW, "latency_p50", [], True)
    assert fig.layout.yaxis.title.text == "latency p50 (ms)"
    assert list(fig.data[0].y) == pytest.approx([27.5, 26.6])  # ms, as the tables show it
    figures = [fig, *make_plots(_two_gossip_runs()).values()]
    for shown in figures:
        for axis in (shown.layout.xaxis, shown.layout.yaxis):
            title = axis.title.text
            assert title and UNIT.search(title), (shown.layout.title.text, title)


def test_parameters_are_named_as_people_write_them_and_few_values_are_categories(
    spark: Any,
) -> None:
    rows = [
        (p, str(f), str(v), 3, 0.99 + p / 1000, 0.001, 0.02 - f / 100, 0.001)
        for p, (f, v) in enumerate((f, v) for f in (0.0, 0.1, 0.5, 0.85) for v in (3, 4))
    ]
    table = spark.createDataFrame(
        rows,
        f"point long, {column_name(FRACTION)} string, {column_name(VIEW)} string, runs long, "
        "reliability_mean double, reliability_std double, latency_p50_mean double, "
        "latency_p50_std double",
    )
    grid = SimpleNamespace(
        parameters=[FRACTION, VIEW],
        points=[{FRACTION: f, VIEW: v} for f in (0.0, 0.1, 0.5, 0.85) for v in (3, 4)],
    )
    figures = comparison_plots(table.toPandas(), grid, ["reliability", "latency_p50"])
    by_view = figures[f"reliability against {VIEW}"]
    assert by_view.layout.xaxis.type == "category"  # 3 and 4: no 3.5 in between
    assert list(by_view.layout.xaxis.categoryarray) == ["3", "4"]
    assert by_view.layout.xaxis.title.text == "active_view (neighbours)"
    assert [t.name for t in by_view.data] == [
        "failed = 0%", "failed = 10%", "failed = 50%", "failed = 85%"
    ]  # fmt: skip
    by_fraction = figures[f"latency_p50 against {FRACTION}"]
    assert by_fraction.layout.xaxis.type != "category"  # four unevenly spaced fractions
    assert by_fraction.layout.xaxis.title.text == "failed (% of the nodes)"
    assert [t.name for t in by_fraction.data] == ["active_view = 3", "active_view = 4"]
    for fig in figures.values():
        words = fig.layout.title.text + "".join(str(t.name) for t in fig.data)
        assert "stack_gossip" not in words and "faults_0" not in words, words


def test_a_small_reliability_difference_is_not_drawn_as_a_cliff() -> None:
    frame = pd.DataFrame(
        {FRACTION: [0.0, 0.5, 0.85], "reliability_mean": [0.9982, 0.9914, 1.0],
         "reliability_std": [0.0009, 0.011, 0.0], "runs": [3, 3, 3]}
    )  # fmt: skip
    fig = charts.metric_against(frame, FRACTION, "reliability", [], False)
    low, high = fig.layout.yaxis.range
    assert high >= 1.0 and high - low >= charts.RELIABILITY_SPAN, (low, high)
    notes = " ".join(a.text for a in fig.layout.annotations)
    assert "not 0" in notes and "0.86%" in notes, notes


def _grid8(tmp_path: Path) -> Any:
    grid_file = tmp_path / "g.toml"
    grid_file.write_text(
        f'base = "{BASE}"\nseeds = [1, 2, 3]\n[grid]\n"{FRACTION}" = [0.0, 0.1, 0.5, 0.85]\n'
        f'"{VIEW}" = [3, 4]\n'
    )
    return load_grid(grid_file)


PRESENT = ["reliability", "history_reliability", "duplicates", "latency_p50", "latency_p99",
           "rmr_mean", "ldh_mean", "rmr_late", "ldh_late", "control_overhead", "load_gini",
           "degree_max", "degree_mean", "diameter"]  # fmt: skip


def _comparison(grid: Any) -> list[dict[str, Any]]:
    rows = []
    for point, values in enumerate(grid.points):
        row: dict[str, Any] = {"point": point, "runs": 3}
        row |= {column_name(k): str(v) for k, v in values.items()}
        for metric in PRESENT:
            row[f"{metric}_mean"] = 0.9982 - point / 1000 if "rel" in metric else 5.107 + point
            row[f"{metric}_std"] = 0.00091 if "rel" in metric else 0.39
        row["latency_p99_mean"] = 0.5632
        rows.append(row)
    return rows


def _sweep(grid: Any, lead: dict[str, Any]) -> SweepResult:
    from pubmesh.analysis.sweep import point_table

    comparison = _comparison(grid)
    overview = [("Comparison by grid point (mean and sd over seeds)",
                 point_table(grid, comparison, PRESENT))]  # fmt: skip
    analysis = SimpleNamespace(rows=[])
    return SweepResult(grid, [], [], comparison, PRESENT, analysis, {}, [], "t", lead=lead,
                       overview=overview)  # fmt: skip


def test_the_point_table_comes_before_the_charts_and_needs_no_sideways_scroll(
    tmp_path: Path,
) -> None:
    grid = _grid8(tmp_path)
    frame = pd.DataFrame({FRACTION: [0.0, 0.5], "reliability_mean": [1.0, 0.99],
                          "reliability_std": [0.0, 0.0], "runs": [3, 3]})  # fmt: skip
    lead = {f"reliability against {FRACTION}": charts.metric_against(
        frame, FRACTION, "reliability", [], False)}  # fmt: skip
    report = tmp_path / "report.html"
    _sweep(grid, lead).write_report(report)
    text = report.read_text()
    table = text.index("Comparison by grid point")
    assert table < text.index("class='chart'") and table < text.index("What the sweep shows")
    top = text[table : text.index("</table>", table)]
    assert "class='scroll'" not in top  # nothing to scroll sideways
    assert top.count("<th") <= 12, top.count("<th")  # 8 metrics, not 14 × mean and sd
    assert "<th>active_view</th>" in top and "<th>failed</th>" in top
    assert "<td>85%</td>" in top and "stack.gossip" not in top
    assert "0.9982<br><small>± 0.00091</small>" in top  # mean over spread in one cell
    assert "563.2" in top  # latency in ms
    legend = text[text.index("</table>", table) :][:600]
    assert "p50 ms</b>: latency p50 (ms)" in legend and "rel.</b>: reliability" in legend


def test_terminal_tables_fit_100_columns_with_no_heading_cut(tmp_path: Path) -> None:
    from pubmesh.analysis.report import print_runs

    grid = _grid8(tmp_path)
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)  # a wide terminal, or a pipe
    sweep = SweepResult(grid, [], [], _comparison(grid), PRESENT, None, {}, [], "t")
    print_comparison(sweep, console, "pubmesh sweep g.toml: mean ± sd over seeds")
    runs = [
        {"run_id": f"paper004_fail50-gossip-s{i}-0123abc{i}", "stack": "gossip", "nodes": 17,
         "seed": i, "reliability": 0.9982, "latency_p50": 0.0275, "rmr_mean": 5.107,
         "control_overhead": 9.583, "load_gini": 0.087, "degree_max": 4}
        for i in range(8)
    ]  # fmt: skip
    print_runs(runs, "pubmesh analyze (8 runs)", console)
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert "…" not in text
    for word in ("failed", "active_view", "reliability", "85%", "0.9982", "±0.00091", "27.5",
                 "ctrl/node/s", "load Gini", "paper004_fail50-"):  # fmt: skip
        assert word in text, word


def test_the_load_histogram_axis_fits_its_bars() -> None:
    # 999 nodes under 3k messages, one at 12k: a bar of 0.1% nobody can see
    frame = pd.DataFrame(
        {"run_id": ["big"] * 4 + ["small"] * 2, "load_bin": [0.0, 1000.0, 2000.0, 12000.0,
         1000.0, 2000.0], "count": [300, 500, 199, 1, 10, 7]}
    )  # fmt: skip
    fig = charts.run_histogram(frame, "load_bin", "count", {"big": "gossip", "small": "gossip"},
                               title="load", xlabel="messages in + out (bins of 1000)")  # fmt: skip
    low, high = fig.layout.xaxis.range
    assert low <= 0 and 2000 < high <= 3500, (low, high)
    notes = " ".join(a.text for a in fig.layout.annotations)
    assert "1 node beyond" in notes and "12,000" in notes, notes


def test_a_start_up_burst_does_not_flatten_the_message_chart_and_the_chart_says_so() -> None:
    frame = pd.DataFrame(
        [(s, "Beacon", 20_000 if s < 2 else 40) for s in range(60)]
        + [(s, "Gossip", 300 + s % 5) for s in range(60)],
        columns=["second", "type", "sent"],
    )
    fig = charts.messages_per_second(frame)
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.yaxis.title.text.endswith("(log scale)")
    assert "log scale: Beacon peaks at 20,000/s at 0 s" in fig.layout.title.text
    # steady rates of one magnitude stay on a linear axis
    calm = charts.messages_per_second(frame.assign(sent=frame["sent"].clip(upper=400)))
    assert calm.layout.yaxis.type != "log" and "log" not in calm.layout.title.text
