"""``pubmesh sweep``: a base scenario × a parameter grid × seeds, simulated as Spark tasks.

A grid file is TOML::

    # Henriques & Pamplona §4.2: reliability against the share of failed nodes
    base = "../scenarios/paper004_fail50.toml"   # relative to this file
    seeds = [1, 2, 3]                           # or a count: seeds = 3 means 1, 2, 3
    [grid]                                      # every combination is one grid point
    "faults.0.fraction" = [0.0, 0.1, 0.5, 0.85]
    "stack.gossip.active_view" = [3, 4]
    [set]                                       # overrides applied to every point
    "run.duration" = 120.0

Grid keys are the scenario override keys of ``pubmesh sim --set`` (``section.key``); the
special key ``scenario`` sweeps over base scenario files instead (e.g. one per stack). Every
(point, seed) is checked on the driver before anything runs, so a bad value is one line naming
the grid file, the key and the point.

Each (point, seed) simulation is one Spark task (``sc.parallelize(tasks, len(tasks))``), so a
cluster runs them in parallel; pubmesh must be importable on the workers (local mode: it is).
A task writes its trace straight into one dataset partitioned by run:
``OUT/traces/<table>/run_id=<id>/part-00000.parquet``. A task that fails returns its error
instead of raising, so the other tasks complete, and the failure is reported with its seed,
its point and the command that replays it. Then one Spark job analyses every run
(:func:`pubmesh.analysis.job.analyze`), and the comparison groups the per-run metrics by grid
point (mean and sample standard deviation over seeds) and plots each metric against each swept
parameter.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import re
import shutil
import threading
import time
import tomllib
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubmesh.errors import ScenarioError

SPECIAL_KEYS = ("scenario",)
#: Metrics the printed comparison shows (the report has all of COMPARED).
PRINTED = (
    "reliability",
    "history_reliability",
    "latency_p50",
    "latency_p99",
    "rmr_mean",
    "ldh_mean",
    "control_overhead",
    "convergence_time",
)
#: Metrics compared across grid points, when a run has them.
COMPARED = (
    "reliability",
    "history_reliability",
    "duplicates",
    "latency_p50",
    "latency_p99",
    "rmr_mean",
    "ldh_mean",
    "rmr_late",
    "ldh_late",
    "false_positive_rate",
    "control_overhead",
    "load_gini",
    "degree_max",
    "degree_mean",
    "diameter",
    "convergence_time",
    "config_requests",
    "filter_conjunctions_mean",
    "filter_conjunctions_max",
    "order_violations",
    "stalls",
    "tagged",
    "safety_drops",
    "replayed",
)


@dataclass(frozen=True)
class Task:
    index: int
    point: int
    seed: int
    values: tuple[tuple[str, Any], ...]
    scenario_path: str
    overrides: tuple[str, ...]
    text: str

    def replay(self) -> str:
        sets = " ".join(f"--set {o}" for o in self.overrides if not o.startswith("run.seed="))
        return f"pubmesh sim {self.scenario_path} --seed {self.seed} {sets}".strip()


@dataclass
class Grid:
    path: Path
    parameters: list[str]
    points: list[dict[str, Any]]
    seeds: list[int]
    tasks: list[Task] = field(default_factory=list)
    #: one line per swept parameter that changes nothing (:func:`inert_warnings`)
    warnings: list[str] = field(default_factory=list)
    #: the points' timing mistakes, each line once (:func:`pubmesh.scenario.model.timing_warnings`)
    timing: list[str] = field(default_factory=list)
    #: nodes summed over every task's run: what the traces' size grows with
    node_runs: int = 0

    @property
    def small(self) -> bool:
        """Whether the traces will be small (:data:`SMALL_NODE_RUNS`): the sweep's Spark then
        runs as for a small analysis (:func:`pubmesh.analysis.spark.driver_java_options`)."""
        return self.node_runs <= SMALL_NODE_RUNS


#: node-runs up to which a sweep's traces stay well under
#: :data:`pubmesh.analysis.spark.SMALL_INPUT_BYTES` (the README's 1,000-node gossip run writes
#: 17 MB, 17 KB a node; paper004_failures' 24 runs of 17 nodes are 408)
SMALL_NODE_RUNS = 2_000


def _toml_literal(value: Any) -> str:
    from pubmesh.tomlio import TomlWriteError, dumps_value

    try:
        return dumps_value(value)
    except TomlWriteError:
        raise ScenarioError(f"cannot use {value!r} as a scenario value") from None


def load_grid(path: Path | str, *, seeds: list[int] | None = None) -> Grid:
    """Read and check a grid file; every (point, seed) scenario is validated here."""
    from pubmesh.scenario.model import Scenario, load_scenario, timing_warnings

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such grid file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"{path}: cannot read grid file ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{path}: not valid TOML ({error})") from None
    unknown = sorted(set(data) - {"base", "seeds", "grid", "set"})
    if unknown:
        raise ScenarioError(f"{path}: unknown key {unknown[0]!r} (keys: base, seeds, grid, set)")
    grid = data.get("grid", {})
    fixed = data.get("set", {})
    if not isinstance(grid, dict) or not isinstance(fixed, dict):
        raise ScenarioError(f"{path}: [grid] and [set] must be tables")
    for key, listed in grid.items():
        if not isinstance(listed, list) or not listed:
            raise ScenarioError(f"{path}: [grid] {key} must be a non-empty array of values")
    bases = grid.get("scenario")
    if bases is None:
        if not isinstance(data.get("base"), str):
            raise ScenarioError(
                f"{path}: base must name a scenario file (or sweep [grid] scenario)"
            )
        bases = [data["base"]]
    elif "base" in data:
        raise ScenarioError(f"{path}: give either base or [grid] scenario, not both")
    raw_seeds = data.get("seeds", [1]) if seeds is None else seeds
    if isinstance(raw_seeds, int) and not isinstance(raw_seeds, bool) and raw_seeds >= 1:
        raw_seeds = list(range(1, raw_seeds + 1))
    if (
        not isinstance(raw_seeds, list)
        or not raw_seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw_seeds)
    ):
        raise ScenarioError(f"{path}: seeds must be a count ≥ 1 or a non-empty array of integers")
    parameters = list(grid)
    swept = [k for k in parameters if k != "scenario"]
    points: list[dict[str, Any]] = []
    tasks: list[Task] = []
    firsts: list[Scenario] = []  # each point's scenario at its first seed
    node_runs = 0
    combos = itertools.product(*(grid[k] for k in swept)) if swept else [()]
    for base, combo in itertools.product(bases, list(combos)):
        values: dict[str, Any] = {}
        if "scenario" in grid:
            values["scenario"] = base
        values.update(zip(swept, combo, strict=True))
        point = len(points)
        points.append(values)
        scenario_file = (path.parent / str(base)).resolve()
        overrides = [f"{k}={_toml_literal(v)}" for k, v in fixed.items()]
        overrides += [f"{k}={_toml_literal(v)}" for k, v in zip(swept, combo, strict=True)]
        for seed in raw_seeds:
            full = [*overrides, f"run.seed={seed}"]
            try:
                scenario = load_scenario(scenario_file, full)
            except ScenarioError as error:
                shown = ", ".join(f"{k}={v}" for k, v in values.items())
                where = f"grid point {shown}" if shown else "base scenario"
                raise ScenarioError(f"{path}: {where}: {error}") from None
            if len(firsts) == point:
                firsts.append(scenario)
            node_runs += scenario.run.nodes
            tasks.append(
                Task(
                    index=len(tasks),
                    point=point,
                    seed=seed,
                    values=tuple(values.items()),
                    scenario_path=str(scenario_file),
                    overrides=tuple(full),
                    text=scenario.text,
                )
            )
    grid_ = Grid(path, parameters, points, list(raw_seeds), tasks, node_runs=node_runs)
    grid_.warnings = inert_warnings(grid_, firsts)
    grid_.timing = list(dict.fromkeys(line for s in firsts for line in timing_warnings(s)))
    return grid_


def inert_warnings(grid: Grid, scenarios: list[Any]) -> list[str]:
    """One line per swept parameter that changes nothing: two grid points that differ in it
    run the same effective scenario (:func:`pubmesh.scenario.model.effective_signature`, seed
    and name aside). The line says why when the scenario can tell
    (:func:`pubmesh.scenario.model.inert_parameters`, e.g. "active_view is set, so fanout is
    unused"), else that the values give the same scenario."""
    from pubmesh.scenario.model import effective_signature, inert_parameters

    seen: dict[str, int] = {}
    reasons: dict[str, str] = {}
    examples: dict[str, tuple[int, int]] = {}
    for point, scenario in enumerate(scenarios):
        inert = inert_parameters(scenario)
        signature = effective_signature(scenario, inert)
        other = seen.setdefault(signature, point)
        if other == point:
            continue
        for key in grid.parameters:
            if key in examples or grid.points[other].get(key) == grid.points[point].get(key):
                continue
            examples[key] = (other, point)
            if key in inert:
                reasons[key] = inert[key]
            elif key == "scenario":
                reasons[key] = "the scenario files differ only in their names"
            else:
                reasons[key] = "its values give the same scenario"
    lines = []
    for key, (a, b) in examples.items():
        values = f"{grid.points[a].get(key)!r} and {grid.points[b].get(key)!r}"
        lines.append(
            f"{grid.path.name}: {key} changes nothing here: {reasons[key]} "
            f"(points {a} and {b}, {key} = {values}, run the same scenario)"
        )
    return lines


def inert_section(grid: Grid) -> tuple[str, str] | None:
    """The report's section naming the swept parameters that change nothing, if any."""
    if not grid.warnings:
        return None
    items = "".join(f"<li>{html.escape(line)}</li>" for line in grid.warnings)
    return (
        "Parameters that change nothing",
        f"<p>Grid points that differ only in these run the same scenario, so their rows "
        f"below differ by nothing but chance.</p><ul>{items}</ul>",
    )


def run_task(task: Task, out: str, layers: Sequence[str] = ()) -> dict[str, Any]:
    """Simulate one (point, seed), analyse the run while its trace is at hand
    (:func:`analyse_run`; ``layers`` are the snapshot layers that are not overlay edges) and
    move its trace into the partitioned dataset. ``seconds`` is the simulation's time (and
    the move's), ``analysis_seconds`` the analysis's.

    Runs on a Spark worker. Never raises: a failure comes back as ``ok = False``."""
    from pubmesh.scenario.model import parse_scenario
    from pubmesh.sim.engine import run_id_for
    from pubmesh.sim.runner import run_scenario

    started = time.perf_counter()
    result: dict[str, Any] = {"index": task.index, "point": task.point, "seed": task.seed}
    try:
        scenario = parse_scenario(task.text, source=task.scenario_path)
        run_id = run_id_for(scenario)
        result["run_id"] = run_id
        scratch = Path(out) / "scratch" / run_id
        if scratch.exists():
            shutil.rmtree(scratch)
        run = run_scenario(scenario, scratch)
        analysing = time.perf_counter()
        result["metrics"] = analyse_run(scratch, run_id, layers)
        result["analysis_seconds"] = round(time.perf_counter() - analysing, 3)
        _move_into_dataset(scratch, Path(out) / "traces", run_id)
        result.update(ok=True, events=run.stats["events_processed"])
        (Path(out) / "runs").mkdir(parents=True, exist_ok=True)
        shutil.move(str(scratch / "run.json"), Path(out) / "runs" / f"{run_id}.json")
        shutil.rmtree(scratch, ignore_errors=True)
    except Exception as error:  # reported with its seed and scenario; the rest go on
        result.update(
            ok=False,
            error=f"{type(error).__name__}: {error}",
            traceback=traceback.format_exc(limit=6),
        )
    spent = time.perf_counter() - started - result.get("analysis_seconds", 0.0)
    result["seconds"] = round(spent, 3)
    return result


def analyse_run(run_dir: Path, run_id: str, layers: Sequence[str]) -> dict[str, bytes] | None:
    """The metric tables of the run just simulated into ``run_dir``, in the task that
    simulated it (:func:`pubmesh.analysis.runtask.analyse`): the sweep's analysis then starts
    no task of its own for it. None for a run too large for one task, or one whose analysis
    failed here: the sweep's analysis then reads it from the dataset and says what is wrong."""
    import pyarrow.parquet as pq

    from pubmesh.analysis import runtask
    from pubmesh.analysis.job import timeout_interval
    from pubmesh.trace.schema import SCHEMAS

    files = {
        table: [str(p) for p in sorted((run_dir / table).glob("*.parquet"))]
        for table in SCHEMAS
        if (run_dir / table).is_dir()
    }
    if sum(Path(p).stat().st_size for paths in files.values() for p in paths) > (
        runtask.TASK_RUN_BYTES
    ):
        return None
    try:
        run = pq.read_table(files["runs"][0]).to_pylist()[0]
        spec = json.loads(runtask.unit(
            run_id, False, files, non_overlay_layers=list(layers),
            timeout_interval=timeout_interval(run["stack"], run["scenario"]),
        ))  # fmt: skip
        return runtask.analyse(spec)
    except Exception:  # analysed again from the dataset, where an error is reported
        return None


def _move_into_dataset(run_dir: Path, dataset: Path, run_id: str) -> None:
    """Rewrite each table of a run directory as a partition ``run_id=<id>`` (without the
    run_id column, which the partition path carries)."""
    import pyarrow.parquet as pq

    for table_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        target = dataset / table_dir.name / f"run_id={run_id}"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for part in sorted(table_dir.glob("*.parquet")):
            table = pq.read_table(part)
            table = table.drop_columns(["run_id"])
            pq.write_table(table, target / part.name, compression="zstd")


def run_tasks(
    spark: Any, tasks: list[Task], out: Path, progress: bool = True
) -> list[dict[str, Any]]:
    """Run every task as one Spark task, with a progress bar fed by Spark's status tracker."""
    sc = spark.sparkContext
    out_str = str(out.resolve())
    group = f"pubmesh-sweep-{time.time_ns()}"
    sc.setJobGroup(group, f"pubmesh sweep: {len(tasks)} simulations")
    from pubmesh.analysis.job import non_overlay_layers

    layers = non_overlay_layers()
    rdd = sc.parallelize(tasks, len(tasks)).map(lambda task: run_task(task, out_str, layers))
    results: list[dict[str, Any]] = []
    failure: list[BaseException] = []

    def collect() -> None:
        try:
            results.extend(rdd.collect())
        except BaseException as error:  # surfaced on the driver thread below
            failure.append(error)

    worker = threading.Thread(target=collect, daemon=True)
    worker.start()
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress(
            "[bold]simulating",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=False,
        ) as bar:
            handle = bar.add_task("tasks", total=len(tasks))
            while worker.is_alive():
                bar.update(handle, completed=_completed(sc, group))
                worker.join(0.5)
            bar.update(handle, completed=len(tasks) if not failure else _completed(sc, group))
    worker.join()
    sc.setLocalProperty("spark.jobGroup.id", None)
    if failure:
        raise failure[0]
    return sorted(results, key=lambda r: r["index"])


def _completed(sc: Any, group: str) -> int:
    tracker = sc.statusTracker()
    done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
    return done


def scenario_name(value: Any) -> str:
    """A swept scenario as a reader sees it: its name (the file's stem), never its absolute
    path, which tells a reader nothing and crowds a chart's axis."""
    return Path(str(value)).stem


def shown_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with a swept scenario shown by :func:`scenario_name`."""
    key = column_name("scenario")
    return [r | {key: scenario_name(r[key])} if r.get(key) else r for r in rows]


def column_name(parameter: str) -> str:
    """A Spark-safe column for a grid key ("faults.0.fraction" -> "faults_0_fraction")."""
    return "".join(c if c.isalnum() else "_" for c in parameter)


def compare(
    grid: Grid, results: list[dict[str, Any]], run_rows: list[dict[str, Any]]
) -> tuple[Any, list[str]]:
    """Per grid point: the swept values, the number of runs, and the mean and sample standard
    deviation over seeds of each metric the runs have (pandas, ordered by point), and those
    metrics. One row a run goes in, whatever the runs' size: a few dozen rows, which a Spark
    job would take seconds to plan and run on a small sweep."""
    import pandas as pd

    keys = ["point"] + [column_name(k) for k in grid.parameters]
    rows = []
    for result in results:
        if not result.get("ok"):
            continue
        values = dict(grid.tasks[result["index"]].values)
        rows.append(
            (result["run_id"], result["point"], *(str(values.get(k)) for k in grid.parameters))
        )
    points = pd.DataFrame(rows, columns=["run_id", *keys])
    present = [m for m in COMPARED if any(r.get(m) is not None for r in run_rows)]
    metrics = pd.DataFrame(
        [[r["run_id"], *(r.get(m) for m in present)] for r in run_rows],
        columns=["run_id", *present],
    )
    joined = points.merge(metrics, on="run_id")
    grouped = joined.groupby(keys, sort=False, dropna=False)
    table = grouped.size().rename("runs").reset_index()
    for metric in present:
        values = joined[metric].astype("float64").groupby([joined[k] for k in keys], sort=False)
        table[f"{metric}_mean"] = values.mean().to_numpy()
        table[f"{metric}_std"] = values.std(ddof=1).to_numpy()
    return table.sort_values("point", kind="mergesort").reset_index(drop=True), present


def write_grid(table: Any, path: Path) -> None:
    """:func:`compare`'s table as ``metrics/grid`` (one Parquet file; NaN as null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), path / "part-00000.parquet")


def comparison_rows(table: Any) -> list[dict[str, Any]]:
    """:func:`compare`'s table as rows of Python values (None where a value is missing)."""
    return [
        {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for row in table.astype(object).to_dict("records")
    ]


def _numeric(values: Any) -> Any:
    """A column of swept values as integers or floats when every value is one, else as is."""
    import pandas as pd

    try:
        numbers = pd.to_numeric(values)
    except (ValueError, TypeError):
        return values
    if (numbers == numbers.round()).all():
        return numbers.astype("int64")
    return numbers.astype(float)


#: the sweep report's first charts, at most LEADING of them: these metrics against each
#: numeric swept parameter, in this order, where they vary
LEAD_METRICS = (
    "reliability",
    "latency_p50",
    "rmr_mean",
    "ldh_mean",
    "control_overhead",
    "convergence_time",
    "history_reliability",
    "latency_p99",
)
LEADING = 6


def varying(frame: Any, metric: str) -> bool:
    """Whether ``metric``'s means differ between grid points (a chart of a metric that is
    absent or constant says nothing)."""
    column = f"{metric}_mean"
    return column in frame and frame[column].dropna().nunique() > 1


def leading_captions(figures: dict[str, Any], grid: Grid, frame: Any) -> list[str]:
    """The captions of the sweep report's first charts (:data:`LEAD_METRICS`)."""
    numeric = [
        k
        for k in grid.parameters
        if k != "scenario"
        and len({str(p.get(k)) for p in grid.points}) > 1
        and all(_is_number(p.get(k)) for p in grid.points)
    ]
    chosen: list[str] = []
    for metric in LEAD_METRICS:
        for parameter in numeric:
            caption = f"{metric} against {parameter}"
            if caption in figures and varying(frame, metric) and len(chosen) < LEADING:
                chosen.append(caption)
    return chosen


def _is_number(value: Any) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def sweep_headline(
    grid: Grid,
    comparison: list[dict[str, Any]],
    failed: int = 0,
    expected: dict[int, float] | None = None,
) -> str:
    """The sweep report's first sentence: what was swept, how many runs completed (``failed``
    tasks are said apart: the means are over the others), and where reliability and latency
    were best and worst (means over seeds); then, where a metric moved against intuition
    (reliability rising as more nodes fail), what moved and why (:func:`against_intuition`;
    ``expected``: point → mean expected deliveries per run)."""
    return _extremes(grid, comparison, failed) + against_intuition(grid, comparison, expected)


def _mean_at(rows: list[dict[str, Any]], column: str, value: float, metric: str) -> float | None:
    found = [
        float(r[metric])
        for r in rows
        if r.get(metric) is not None and _is_number(r.get(column)) and
        abs(float(str(r[column])) - value) < 1e-12
    ]  # fmt: skip
    return sum(found) / len(found) if found else None


def against_intuition(
    grid: Grid, comparison: list[dict[str, Any]], expected: dict[int, float] | None = None
) -> str:
    """Sentences for what moved against intuition as a failed fraction grew, and why: ""
    when nothing did. Reliability counts the (subscriber, publication) pairs of the nodes
    alive to the end, so failing nodes removes pairs as well as paths: with most nodes failed
    the few survivors' pairs may all be delivered (docs/metrics.md, reliability)."""
    from pubmesh.analysis.charts import parameter_label

    swept = [k for k in grid.parameters if len({str(p.get(k)) for p in grid.points}) > 1]
    faults = [k for k in swept if re.fullmatch(r"faults\.\d+\.fraction", k)]
    sentences = []
    for key in faults:
        column = column_name(key)
        values = sorted({float(str(p.get(key))) for p in grid.points if _is_number(p.get(key))})
        if len(values) < 2:
            continue
        low, high = values[0], values[-1]
        name = parameter_label(key, swept)
        over = "; means over the other parameters" if len(swept) > 1 else ""
        rel = (_mean_at(comparison, column, low, "reliability_mean"),
               _mean_at(comparison, column, high, "reliability_mean"))  # fmt: skip
        if rel[0] is not None and rel[1] is not None and rel[1] > rel[0]:
            text = (
                f" Reliability rises as more nodes fail ({rel[0]:.2%} with {low:.0%} {name}, "
                f"{rel[1]:.2%} with {high:.0%}{over}) because it is counted over "
                "the survivors: a failed node expects nothing, so fewer survivors leave fewer "
                "(subscriber, publication) pairs to miss"
            )
            if expected:
                pairs = [
                    sum(v) / len(v) if v else None
                    for v in (
                        [expected[r["point"]] for r in comparison if r.get("point") in expected
                         and abs(float(str(r.get(column))) - x) < 1e-12]
                        for x in (low, high)
                    )
                ]  # fmt: skip
                if pairs[0] and pairs[1]:
                    text += (
                        f" ({pairs[0]:,.0f} pairs expected per run with {low:.0%} {name}, "
                        f"{pairs[1]:,.0f} with {high:.0%})"
                    )
            p50 = (_mean_at(comparison, column, low, "latency_p50_mean"),
                   _mean_at(comparison, column, high, "latency_p50_mean"))  # fmt: skip
            if p50[0] is not None and p50[1] is not None and p50[1] < p50[0]:
                # the same cause: a smaller overlay of survivors, fewer hops to each
                text += (
                    f"; the survivors' smaller overlay is also why latency p50 falls "
                    f"({p50[0] * 1000:,.0f} ms → {p50[1] * 1000:,.0f} ms"
                )
                hops = (_mean_at(comparison, column, low, "ldh_mean_mean"),
                        _mean_at(comparison, column, high, "ldh_mean_mean"))  # fmt: skip
                if hops[0] is not None and hops[1] is not None:
                    text += f", LDH {hops[0]:.1f} → {hops[1]:.1f} hops"
                text += ")"
            sentences.append(text + ".")
    return "".join(sentences)


def _extremes(grid: Grid, comparison: list[dict[str, Any]], failed: int = 0) -> str:
    from pubmesh.analysis.charts import parameter_label, parameter_value

    swept = [k for k in grid.parameters if len({str(p.get(k)) for p in grid.points}) > 1]
    # parameters as people write them (failed = 0%, 50%; active_view = 3, 4)
    label = {k: parameter_label(k, swept) for k in swept}
    values = "; ".join(
        f"{label[k]} = "
        + ", ".join(dict.fromkeys(parameter_value(k, p.get(k)) for p in grid.points))
        for k in swept
    )
    text = f"{len(grid.tasks) - failed} runs ({len(grid.points)} points × {len(grid.seeds)} seeds"
    text += f"; {values}" if values else ""
    text += f"; {failed} of {len(grid.tasks)} failed)" if failed else ")"

    def where(row: dict[str, Any]) -> str:
        shown = (f"{label[k]} = {parameter_value(k, row.get(column_name(k)))}" for k in swept)
        return ", ".join(shown) or "the base"

    def shown(metric: str, value: float) -> str:
        return f"{value * 1000:,.0f} ms" if metric == "latency_p50" else f"{value:.2%}"

    parts = []
    for metric in ("reliability", "latency_p50"):
        rows = [r for r in comparison if r.get(f"{metric}_mean") is not None]
        if not rows:
            continue
        low = min(rows, key=lambda r: r[f"{metric}_mean"])
        high = max(rows, key=lambda r: r[f"{metric}_mean"])
        name = "latency p50" if metric == "latency_p50" else metric
        if low[f"{metric}_mean"] == high[f"{metric}_mean"]:
            parts.append(f"{name} {shown(metric, low[f'{metric}_mean'])} at every point")
        else:
            parts.append(
                f"{name} from {shown(metric, low[f'{metric}_mean'])} ({where(low)}) to "
                f"{shown(metric, high[f'{metric}_mean'])} ({where(high)})"
            )
    return text + (": " + "; ".join(parts) if parts else "") + "."


def comparison_plots(frame: Any, grid: Grid, present: list[str]) -> dict[str, Any]:
    """Each compared metric against each swept parameter, one line per combination of the
    other swept parameters (captioned Plotly figures), from :func:`compare`'s table as pandas;
    none for a metric whose means do not vary between the points."""
    from pubmesh.analysis import charts

    figures: dict[str, Any] = {}
    swept = [k for k in grid.parameters if len({str(p.get(k)) for p in grid.points}) > 1]
    for parameter in swept:
        column = column_name(parameter)
        others = [column_name(k) for k in swept if k != parameter]
        data = frame.copy()
        # swept values arrive as strings: numbers become numbers, so the x axis is numeric
        # and the series sort 100, 300, 1000 rather than 100, 1000, 300
        for name in (column, *others):
            if name == column_name("scenario"):
                data[name] = data[name].map(scenario_name)
            data[name] = _numeric(data[name])
        # text, or a few values (an active view of 3 or 4): a category each, not a scale
        categorical = data[column].dtype == object or charts.few_valued(data[column])
        data = data.rename(columns={column: parameter})
        names = {column_name(k): k for k in swept}
        for metric in present:
            if not varying(frame, metric):
                continue
            figures[f"{metric} against {parameter}"] = charts.metric_against(
                data, parameter, metric, others, categorical, names
            )
    return figures


#: the point table's metrics and their short headings (the legend under it spells them out)
SHORT = {
    "reliability": "rel.",
    "history_reliability": "hist. rel.",
    "latency_p50": "p50 ms",
    "latency_p99": "p99 ms",
    "rmr_mean": "RMR",
    "ldh_mean": "LDH",
    "control_overhead": "ctrl",
    "convergence_time": "conv. s",
}


#: the printed metrics' names in a terminal table's rows (the report's glossary has them whole)
TERSE = {
    "reliability": "reliability",
    "history_reliability": "history rel.",
    "latency_p50": "latency p50 ms",
    "latency_p99": "latency p99 ms",
    "rmr_mean": "RMR",
    "ldh_mean": "LDH (hops)",
    "control_overhead": "ctrl/node/s",
    "convergence_time": "converged (s)",
}


def mean_sd(row: dict[str, Any], metric: str) -> tuple[str, str]:
    """A metric's mean and spread over seeds as the tables show them (latency in ms)."""
    mean, sd = row.get(f"{metric}_mean"), row.get(f"{metric}_std")
    if mean is None:
        return "–", ""
    if metric.startswith("latency"):
        return f"{mean * 1000:.1f}", f"± {(sd or 0) * 1000:.1f}"
    return f"{mean:.4g}", f"± {sd or 0:.2g}"


def swept_keys(grid: Grid) -> list[str]:
    """The grid keys whose values differ between the points."""
    return [k for k in grid.parameters if len({str(p.get(k)) for p in grid.points}) > 1]


def point_table(grid: Grid, comparison: list[dict[str, Any]], present: list[str]) -> str:
    """The report's per-point table, near its top: a row per grid point, the swept
    parameters as people write them (``active_view``, ``failed 85%``), the runs, and the
    :data:`PRINTED` metrics as mean over ± sd in one narrow cell under a short heading, a
    legend under it: no sideways scrolling (every metric: :func:`full_table`)."""
    from pubmesh.analysis.charts import metric_axis, parameter_label, parameter_value
    from pubmesh.analysis.report import GLOSSARY

    keys = swept_keys(grid) or grid.parameters
    shown = [m for m in PRINTED if m in present]
    heads = ["point", *(parameter_label(k, keys) for k in keys), "runs"]
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in heads) + "".join(
        f"<th title='{html.escape(GLOSSARY.get(m, m))}'>{html.escape(SHORT[m])}</th>" for m in shown
    )
    body = []
    for row in shown_rows(comparison):
        values = [str(row.get("point"))]
        values += [parameter_value(k, row.get(column_name(k))) for k in keys]
        values.append(str(row.get("runs")))
        tds = "".join(f"<td>{html.escape(v)}</td>" for v in values)
        for metric in shown:
            mean, sd = mean_sd(row, metric)
            tds += f"<td>{html.escape(mean)}<br><small>{html.escape(sd)}</small></td>"
        body.append(f"<tr>{tds}</tr>")
    legend = "; ".join(f"<b>{html.escape(SHORT[m])}</b>: {html.escape(metric_axis(m))}"
                       for m in shown)  # fmt: skip
    return (
        f"<table class='points'><thead><tr>{cells}</tr></thead><tbody>{''.join(body)}"
        f"</tbody></table><p class='note'>Each cell: the mean over seeds, under it ± the "
        f"sample standard deviation. {legend}.</p>"
    )


def full_table(grid: Grid, comparison: list[dict[str, Any]], present: list[str]) -> str:
    """Every compared metric per grid point (wide: collapsed, and it scrolls sideways)."""
    from pubmesh.analysis.charts import parameter_label
    from pubmesh.analysis.report import html_table

    columns = [(column_name(k), parameter_label(k, grid.parameters), "{}")
               for k in grid.parameters] + [("runs", "runs", "{}")]  # fmt: skip
    for metric in present:
        latency = metric.startswith("latency")
        unit = " (ms)" if latency else ""
        columns.append((f"{metric}_mean", f"{metric} mean{unit}", "ms" if latency else "{:.4g}"))
        columns.append((f"{metric}_std", "sd", "ms" if latency else "{:.2g}"))
    return (
        f"<details><summary>Show the table ({len(present)} metrics, mean and sd each: wide, "
        "it scrolls sideways)</summary>"
        f"{html_table(shown_rows(comparison), columns, first='point')}</details>"
    )


@dataclass
class SweepResult:
    grid: Grid
    results: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    comparison: list[dict[str, Any]]
    present: list[str]
    analysis: Any
    #: captioned Plotly figures
    figures: dict[str, Any]
    sections: list[Any]
    title: str
    static: bool = False
    #: the report's first sentence (:func:`sweep_headline`)
    headline: str = ""
    #: the charts the report leads with (:func:`leading_captions`), by caption
    lead: dict[str, Any] = field(default_factory=dict)
    #: the sections right under the headline: what changes nothing, the per-point table
    overview: list[Any] = field(default_factory=list)

    def write_report(self, path: Path, leading: list[Any] | None = None) -> None:
        """``report.html``: the headline and the leading charts (or, given, ``leading``
        sections of the caller's, such as the demo's comparison, with the leading charts
        then among the rest), the grid comparison, failures, the runs and every plot (PNG
        charts when the sweep is ``static``)."""
        from pubmesh.analysis.report import Chart, charts_of, write_report

        figures = self.figures
        first: list[Any] = list(leading or [])
        if leading:
            figures = self.lead | figures
            first += self.overview
        else:
            first += self.overview
            if self.lead:
                charts: list[str | Chart] = list(charts_of(self.lead, prefix="lead"))
                first.append(
                    ("What the sweep shows (mean over seeds; every chart: All plots)", charts)
                )

        write_report(path, self.title, self.analysis.rows, charts_of(figures),
                     [*first, *self.sections], static=self.static,
                     headline=None if leading else self.headline)  # fmt: skip


def run_sweep(
    spark: Any,
    grid: Grid,
    out: Path,
    *,
    progress: bool = True,
    console: Any = None,
    title: str | None = None,
    static: bool = False,
    report: bool = True,
) -> SweepResult:
    """Simulate every task, analyse all runs in one Spark job, compare the grid points and
    write ``OUT/report.html`` (comparison first, then the runs; PNG charts if ``static``;
    none if not ``report``: the demo writes its own)."""
    from rich.console import Console

    from pubmesh.analysis.job import analyze
    from pubmesh.errors import UserError

    console = console or Console()
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("traces", "runs", "scratch"):
        shutil.rmtree(out / stale, ignore_errors=True)
    results = run_tasks(spark, grid.tasks, out, progress=progress)
    shutil.rmtree(out / "scratch", ignore_errors=True)
    failures = [r for r in results if not r.get("ok")]
    for failure in failures:
        task = grid.tasks[failure["index"]]
        shown = ", ".join(f"{k}={v}" for k, v in task.values) or "base"
        failure["replay"] = task.replay()
        failure["values"] = dict(task.values)
        console.print(
            f"[red]task {task.index} failed[/] (point {shown}, seed {task.seed}): "
            f"{failure['error']}\n  replay: {failure['replay']}"
        )
    done = {}  # the runs the tasks analysed (tables as Arrow data: not for tasks.json)
    for task_result in results:
        if tables := task_result.pop("metrics", None):
            done[task_result["run_id"]] = tables
    (out / "tasks.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if len(failures) == len(results):
        raise UserError(f"{grid.path}: every one of the {len(results)} simulations failed")
    analysis = analyze(spark, [out / "traces"], out, report=False, done=done)
    table, present = compare(grid, results, analysis.rows)
    write_grid(table, out / "metrics" / "grid")
    comparison = comparison_rows(table)
    compared = comparison_plots(table, grid, present)
    lead = leading_captions(compared, grid, table)
    figures = {k: v for k, v in compared.items() if k not in lead} | analysis.figures
    overview: list[Any] = [("Comparison by grid point (mean and sd over seeds)",
                            point_table(grid, comparison, present))]  # fmt: skip
    inert = inert_section(grid)
    if inert is not None:
        overview.insert(0, inert)
    extra: list[Any] = [("Every metric by grid point", full_table(grid, comparison, present))]
    extra.extend(analysis.notes)
    if failures:
        items = "".join(
            f"<li>point {f['point']}, seed {f['seed']}: {html.escape(f['error'])} — "
            f"<code>{html.escape(f['replay'])}</code></li>"
            for f in failures
        )
        extra.append(("Failed tasks", f"<ul>{items}</ul>"))
    summary = json.loads((out / "summary.json").read_text())
    summary["grid"] = {
        "file": str(grid.path),
        "parameters": grid.parameters,
        "seeds": grid.seeds,
        "inert": grid.warnings,
    }
    summary["comparison"] = comparison
    summary["failures"] = failures
    (out / "summary.json").write_text(
        json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n"
    )
    result = SweepResult(
        grid, results, failures, comparison, present, analysis, figures, extra,
        title or f"pubmesh sweep: {grid.path.name}", static,
        sweep_headline(grid, comparison, len(failures), expected_per_point(results, analysis.rows)),
        {k: compared[k] for k in lead}, overview,
    )  # fmt: skip
    if report:
        result.write_report(out / "report.html")
    return result


def expected_per_point(
    results: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> dict[int, float]:
    """point → the mean over its runs of the (subscriber, publication) pairs expected."""
    expected = {r["run_id"]: r.get("expected") for r in rows}
    found: dict[int, list[float]] = {}
    for result in results:
        value = expected.get(result.get("run_id"))
        if result.get("ok") and value is not None:
            found.setdefault(int(result["point"]), []).append(float(value))
    return {point: sum(v) / len(v) for point, v in found.items()}


def print_comparison(sweep: SweepResult, console: Any, title: str) -> None:
    """A column per grid point and a row per swept parameter and printed metric (mean over
    ± sd), split into tables that fit 100 columns: no heading is cut."""
    from pubmesh.analysis.charts import parameter_label, parameter_value
    from pubmesh.analysis.report import fitted_tables

    keys = swept_keys(sweep.grid) or sweep.grid.parameters
    shown = [m for m in sweep.present if m in PRINTED]
    labels = [*(parameter_label(k, keys) for k in keys), "runs", *(TERSE[m] for m in shown)]
    columns = []
    for row in shown_rows(sweep.comparison):
        cells = [parameter_value(k, row[column_name(k)]) for k in keys]
        cells.append(str(row["runs"]))
        for metric in shown:
            mean, sd = mean_sd(row, metric)
            cells.append(f"{mean}\n{sd.replace(' ', '')}")
        columns.append((f"point {row['point']}", cells))
    for table in fitted_tables(title, "", labels, columns):
        console.print(table)
