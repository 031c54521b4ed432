"""`pubmesh sweep` on a tiny grid: simulations as Spark tasks, one partitioned dataset, one
analysis, a comparison per grid point, and failed tasks reported while the rest complete."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from rich.console import Console

import support.probestacks  # noqa: F401  (registers the probe stack in this process only)
from pubmesh.analysis.job import analyze
from pubmesh.analysis.sweep import inert_section, load_grid, run_sweep
from pubmesh.scenario.model import load_scenario
from pubmesh.sim.runner import run_scenario
from support.browser import assert_renders

ROOT = Path(__file__).resolve().parents[2]

# The probe stack is registered in the test process (the driver), not in Spark's Python
# workers: its tasks pass the driver's validation and then fail on the workers, like a
# cluster whose workers run an older pubmesh.
PROBE = """
[run]
stack = "probe"
nodes = 10
duration = 5.0
[[faults]]
at = 1.0
kind = "crash"
fraction = 0.5
"""


# one worker runs this module (it reads the `spark` fixture: tests/conftest.py), so its
# expensive fixture is built once


# session scope, not module: a module fixture is torn down whenever the worker runs another
# module's test in between, and under xdist that rebuilt it (~220 s) within one run
@pytest.fixture(scope="session")
def sweep(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("sweep")
    (base / "probe.toml").write_text(PROBE)
    grid = base / "grid.toml"
    grid.write_text(
        f"""
seeds = [1, 2]
[grid]
scenario = ["{ROOT / "scenarios" / "paper004_fail50.toml"}", "probe.toml"]
"faults.0.fraction" = [0.0, 0.5]
[set]
"workload.publications" = 60
"workload.publish_start" = 30.0
"run.duration" = 50.0
"""
    )
    return run_sweep(spark, load_grid(grid), base / "out", progress=False, console=Console())


def test_every_task_ran_and_failures_are_reported_with_seed_and_replay(sweep: Any) -> None:
    assert len(sweep.results) == 8
    ok = [r for r in sweep.results if r["ok"]]
    assert len(ok) == 4, sweep.failures
    assert len(sweep.failures) == 4
    for failure in sweep.failures:
        assert failure["values"]["scenario"] == "probe.toml"
        assert "probe" in failure["error"], failure
        assert f"--seed {failure['seed']}" in failure["replay"]
        assert "probe.toml" in failure["replay"]
    report = (sweep.analysis.sources[0].root.parent / "report.html").read_text()
    assert "Failed tasks" in report and "probe.toml" in report


def leading_charts(sweep: Any) -> list[Any]:
    """The charts the sweep report leads with."""
    from pubmesh.analysis.report import charts_of

    return charts_of(sweep.lead, prefix="lead")


def test_the_sweep_report_renders_in_a_real_browser(sweep: Any, tmp_path: Path) -> None:
    """Headless Chromium: every plot drew, no JavaScript error, nothing fetched from outside."""
    report = sweep.analysis.sources[0].root.parent / "report.html"
    shown = assert_renders(report, tmp_path / "sweep.png", min_charts=5)
    assert "Failed tasks" in shown.text and "Comparison by grid point" in shown.text
    # interactive: the Plotly bundle once, and every chart (comparison plots and the runs'
    # distributions) is a Plotly chart that drew
    html = report.read_text()
    assert html.count("<script>") >= 1 and "<figure class='chart'" not in html  # no PNG
    drawn = {c["label"] for c in shown.charts if c["kind"] == "svg"}
    leading = leading_charts(sweep)
    assert len(drawn) == len(sweep.figures) + len(leading), (sorted(drawn), sorted(sweep.figures))
    # the report leads with its sentence and at most six charts of a varying metric against
    # the numeric swept parameter; every other chart is under "All plots", collapsed
    text = " ".join(shown.text.split())
    first = text.split("What the sweep shows")[0]
    # the probe's four tasks fail (the fixture's point): the runs counted are the others
    assert "4 runs (4 points × 2 seeds; scenario = " in first, first
    assert "; 4 of 8 failed): " in first, first
    assert 1 <= len(leading) <= 6, leading
    assert all(c.caption.endswith("against faults.0.fraction") for c in leading), leading
    assert text.index("What the sweep shows") < text.index("All plots")


def test_a_static_report_draws_the_same_charts_as_png(sweep: Any, tmp_path: Path) -> None:
    """--static: every chart a PNG (Kaleido in headless Chromium), in the page and in
    figures/ beside it; no JavaScript at all."""
    report = tmp_path / "report.html"
    dataclasses.replace(sweep, static=True).write_report(report)
    html = report.read_text()
    assert "<script" not in html and "plotly-graph-div" not in html
    pngs = sorted((tmp_path / "figures").glob("*.png"))
    charts = len(sweep.figures) + len(leading_charts(sweep))
    assert len(pngs) == charts == html.count("<figure class='chart'")
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000, png
    shown = assert_renders(report, tmp_path / "static.png", min_charts=len(pngs))
    assert {c["kind"] for c in shown.charts} == {"img"}


def test_traces_land_in_one_dataset_partitioned_by_run(sweep: Any) -> None:
    traces = sweep.analysis.sources[0].root
    ok = sorted(r["run_id"] for r in sweep.results if r["ok"])
    for table in ("runs", "publications", "deliveries", "messages"):
        parts = sorted(p.name for p in (traces / table).iterdir())
        assert parts == [f"run_id={run_id}" for run_id in ok], table
    assert sorted(r["run_id"] for r in sweep.analysis.rows) == ok


def test_a_sweep_trace_is_the_trace_pubmesh_sim_writes(sweep: Any, tmp_path: Path) -> None:
    """Same scenario and seed: the task's partition holds exactly the rows a direct run writes."""
    task = next(t for t in sweep.grid.tasks if dict(t.values)["scenario"] != "probe.toml")
    scenario = load_scenario(task.scenario_path, list(task.overrides))
    result = run_scenario(scenario, tmp_path / "direct")
    traces = sweep.analysis.sources[0].root
    for table in ("publications", "deliveries", "messages", "nodes"):
        direct = pq.read_table(tmp_path / "direct" / table).drop_columns(["run_id"])
        swept = pq.read_table(traces / table / f"run_id={result.run_id}")
        assert swept.equals(direct), f"{table} differs; replay: {task.replay()}"


def test_each_run_is_analysed_in_the_task_that_simulated_it_as_its_dataset_would_be(
    spark: Any, sweep: Any, tmp_path: Path
) -> None:
    """The sweep's tasks analyse their own runs (the sweep's analysis starts no task for
    them); the tables are the ones an analysis of the dataset computes, and the comparison
    is the mean and sample deviation of the runs' rows."""
    ok = [r for r in sweep.results if r["ok"]]
    assert ok and all(r["analysis_seconds"] > 0 and "metrics" not in r for r in ok)
    again = analyze(spark, [sweep.analysis.sources[0].root], tmp_path / "again", report=False,
                    engine="tasks")  # fmt: skip
    assert again.rows == sweep.analysis.rows
    out = sweep.analysis.sources[0].root.parent
    for table in ("publications", "nodes", "node_messages", "overlay", "runs"):
        assert pq.read_table(tmp_path / "again" / "metrics" / table).equals(
            pq.read_table(out / "metrics" / table)
        ), table
    per_run = {r["run_id"]: r for r in sweep.analysis.rows}
    for point in sweep.comparison:
        runs = [per_run[r["run_id"]] for r in ok if r["point"] == point["point"]]
        values = [r["reliability"] for r in runs]
        assert point["runs"] == len(runs) == 2
        assert point["reliability_mean"] == pytest.approx(statistics.mean(values), rel=1e-12)
        assert point["reliability_std"] == pytest.approx(statistics.stdev(values), rel=1e-12)


def test_comparison_has_a_row_per_point_with_mean_and_spread(sweep: Any) -> None:
    rows = {(r["scenario"], r["faults_0_fraction"]): r for r in sweep.comparison}
    gossip = str(ROOT / "scenarios" / "paper004_fail50.toml")
    assert set(rows) == {(gossip, "0.0"), (gossip, "0.5")}
    for row in rows.values():
        assert row["runs"] == 2
        assert 0.95 <= row["reliability_mean"] <= 1.0, row
        assert row["reliability_std"] is not None
    # half the nodes crashed: fewer expected deliveries, so fewer payload messages per run
    per_run = {r["run_id"]: r for r in sweep.analysis.rows}
    by_fraction: dict[str, list[int]] = {}
    for result in sweep.results:
        if result["ok"]:
            fraction = str(dict(sweep.grid.tasks[result["index"]].values)["faults.0.fraction"])
            by_fraction.setdefault(fraction, []).append(per_run[result["run_id"]]["expected"])
    assert max(by_fraction["0.5"]) < min(by_fraction["0.0"])
    # a metric is charted against each swept parameter where its means differ between the
    # points, among the leading charts (the numeric parameter) or under All plots; a chart of
    # a constant (or absent) metric would say nothing
    import pandas as pd

    from pubmesh.analysis.sweep import varying

    charted = set(sweep.figures) | {c.caption for c in leading_charts(sweep)}
    frame = pd.DataFrame(sweep.comparison)
    assert any(varying(frame, m) for m in sweep.present)
    for metric in sweep.present:
        for parameter in ("faults.0.fraction", "scenario"):
            shown = f"{metric} against {parameter}" in charted
            assert shown == varying(frame, metric), (metric, parameter)


def test_swept_values_plot_as_numbers_when_they_are_numbers() -> None:
    """Grid values reach the plots as strings; sizes must sort 100, 300, 1000 (not as text)
    and stay integers in the legend, fractions become floats, anything else stays text."""
    import pandas as pd

    from pubmesh.analysis.sweep import _numeric

    sizes = _numeric(pd.Series(["100", "1000", "300"]))
    assert sizes.dtype == "int64" and sorted(sizes) == [100, 300, 1000]
    rates = _numeric(pd.Series(["0.5", "16.0", "2.0"]))
    assert rates.dtype == float and sorted(rates) == [0.5, 2.0, 16.0]
    modes = _numeric(pd.Series(["True", "False"]))
    assert list(modes) == ["True", "False"]


# ------------------------------------------------------------- parameters that change nothing
def _grid(tmp_path: Path, body: str) -> Any:
    path = tmp_path / "g.toml"
    path.write_text(f'base = "{ROOT / "scenarios" / "paper004_fail50.toml"}"\n{body}')
    return load_grid(path)


def test_a_swept_parameter_the_scenario_never_reads_is_named_with_the_reason(
    tmp_path: Path,
) -> None:
    """paper004_fail50 sets active_view = 4, so sweeping fanout (an inert parameter) runs the
    same scenario twice: one line names the parameter and why, and the report marks it."""
    grid = _grid(
        tmp_path, '[grid]\n"faults.0.fraction" = [0.0, 0.5]\n"stack.gossip.fanout" = [3, 4]'
    )
    assert len(grid.warnings) == 1, grid.warnings
    (line,) = grid.warnings
    assert "stack.gossip.fanout changes nothing" in line
    assert "active_view is set (4), so fanout is unused" in line
    assert "points 0 and 1" in line
    section = inert_section(grid)
    assert section is not None and "stack.gossip.fanout" in section[1]


def test_parameters_that_matter_are_not_flagged(tmp_path: Path) -> None:
    """With active_view = 0 fanout sizes the active view, so the same sweep is silent; so is
    a sweep of the active view itself."""
    grid = _grid(
        tmp_path,
        '[grid]\n"stack.gossip.fanout" = [3, 4]\n[set]\n"stack.gossip.active_view" = 0',
    )
    assert grid.warnings == []
    assert inert_section(grid) is None
    assert _grid(tmp_path, '[grid]\n"stack.gossip.active_view" = [3, 4]').warnings == []


def test_workload_keys_without_effect_are_flagged(tmp_path: Path) -> None:
    """No publications: their rate is never read."""
    grid = _grid(
        tmp_path,
        '[grid]\n"workload.publish_rate" = [1.0, 5.0]\n[set]\n"workload.publications" = 0',
    )
    assert len(grid.warnings) == 1
    assert "workload.publications = 0, so publish_rate is unused" in grid.warnings[0]


def test_two_scenario_files_that_run_the_same_thing_are_flagged(tmp_path: Path) -> None:
    """Swept base files that differ only in name and comments: caught by the effective
    scenario, with no rule needed."""
    text = (ROOT / "scenarios" / "paper004_fail50.toml").read_text()
    (tmp_path / "a.toml").write_text(text)
    (tmp_path / "b.toml").write_text("# a copy\n" + text)
    (tmp_path / "g.toml").write_text('[grid]\nscenario = ["a.toml", "b.toml"]')
    grid = load_grid(tmp_path / "g.toml")
    assert len(grid.warnings) == 1
    assert (
        "scenario changes nothing here: the scenario files differ only in their names"
        in (grid.warnings[0])
    )


def test_a_grid_of_small_runs_is_analysed_as_a_small_input(tmp_path: Path) -> None:
    """A sweep starts its Spark before any trace exists, so it sizes the analysis by the runs'
    nodes: paper004_failures (24 runs of 17 nodes) is small (the client compiler alone: its
    sweep took 80-92 s against 107 s with C2), three seeds of 1,000 nodes are not."""
    from pubmesh.analysis.sweep import SMALL_NODE_RUNS
    from pubmesh.catalog import find

    failures = load_grid(find("paper004_failures", kind="grid"))
    assert (failures.node_runs, failures.small) == (24 * 17, True)
    large = _grid(tmp_path, 'seeds = [1, 2, 3]\n[set]\n"run.nodes" = 1000\n')
    assert large.node_runs == 3 * 1000 > SMALL_NODE_RUNS
    assert not large.small
