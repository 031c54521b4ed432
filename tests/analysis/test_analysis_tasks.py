"""A small run's metrics in one Spark task (pubmesh.analysis.runtask) against the Spark plan
(pubmesh.analysis.metrics): the same tables, row for row, on simulated runs of all six stacks
(crash and recover faults, content filters, skipring's checks and supervisor, brokertree's
events, full message traces and per-second counts), from run directories and from a sweep
dataset partitioned by run; and a data page broken under a valid footer named in one line."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pubmesh.analysis.job import Analysis, analyze, in_tasks
from pubmesh.analysis.load import inspect
from pubmesh.analysis.runtask import OUTPUT_SCHEMAS
from pubmesh.catalog import find
from pubmesh.errors import TraceError
from pubmesh.scenario.model import load_scenario
from pubmesh.sim.runner import run_scenario
from pubmesh.trace.schema import SCHEMAS

# one worker builds the runs and both analyses once, for every test here
pytestmark = pytest.mark.xdist_group("spark")

#: (scenario, overrides): small runs that between them exercise every metric
RUNS = {
    "gossip": (
        "paper004_fail50",
        ["workload.late_fraction=0.2", "workload.late_at=60.0", "workload.history=all"],
    ),
    "skipring": ("skipring_paper_claims", ["run.nodes=65"]),
    "chord-counts": ("chord_w1", ["run.nodes=60", "workload.publications=60"]),
    "chord-full": ("chord_w1", ["run.nodes=40", "workload.publications=40", "trace.messages=full"]),
    "brokertree": ("brokertree_demo", []),
    "brokertree-recover": (
        "brokertree_recover",
        ["workload.publications=60", "workload.subscriptions_per_node=4"],
    ),
    "clique": ("clique_corrupted", ["run.nodes=12", "workload.publications=20"]),
    "d2g": ("d2g_corrupted", ["run.nodes=16", "workload.publications=20"]),
    # nothing published: every per-publication figure empty, the run's row still whole
    "silent": ("paper004", ["workload.publications=0"]),
}
#: the rows' keys per table
KEYS = {
    "publications": ["run_id", "pub_id"],
    "nodes": ["run_id", "node"],
    "node_messages": ["run_id", "node", "type", "layer", "payload"],
    "overlay": ["run_id", "t", "topic"],
    "messages_per_second": ["run_id", "second", "type", "layer", "payload"],
    "runs": ["run_id"],
}
#: what the order of floating-point sums may change (Spark's and pandas' means and standard
#: deviations add in different orders); counts and every other value are equal
RELATIVE = 1e-12


def _replay(name: str) -> str:
    scenario, overrides = RUNS[name]
    sets = " ".join(f"--set {o}" for o in overrides)
    return f"pubmesh sim {scenario} {sets} --out RUN"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tasks")
    made = {}
    for name, (scenario, overrides) in RUNS.items():
        made[name] = root / name
        run_scenario(load_scenario(find(scenario), overrides), made[name])
    return made


@pytest.fixture(scope="module")
def both(spark: Any, runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same runs analysed both ways, in one analysis each."""
    out = tmp_path_factory.mktemp("engines")
    roots = list(runs.values())
    plan = analyze(spark, roots, out / "plan", report=False, engine="plan")
    tasks = analyze(spark, roots, out / "tasks", report=False, engine="tasks")
    return out, plan, tasks


def _same(a: Any, b: Any) -> bool:
    none_a = a is None or (isinstance(a, float) and math.isnan(a))
    none_b = b is None or (isinstance(b, float) and math.isnan(b))
    if none_a or none_b:
        return none_a and none_b
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=RELATIVE, abs_tol=RELATIVE)
    return bool(a == b)


def _differences(name: str, plan: pa.Table, tasks: pa.Table) -> list[str]:
    keys = KEYS[name]
    found = []
    if [(f.name, f.type) for f in plan.schema] != [(f.name, f.type) for f in tasks.schema]:
        found.append(f"{name}: columns {plan.schema} against {tasks.schema}")
    if plan.num_rows != tasks.num_rows:
        return [*found, f"{name}: {plan.num_rows} rows in the plan, {tasks.num_rows} in tasks"]
    order = [(k, "ascending") for k in keys]
    p_rows = plan.sort_by(order).to_pylist()
    t_rows = tasks.sort_by(order).to_pylist()
    for p_row, t_row in zip(p_rows, t_rows, strict=True):
        for column, value in p_row.items():
            if not _same(value, t_row.get(column)):
                key = {k: p_row[k] for k in keys}
                found.append(f"{name} {key} {column}: plan {value!r}, tasks {t_row[column]!r}")
    return found


def test_every_metric_table_is_the_same_in_tasks_as_in_the_spark_plan(both: Any) -> None:
    out, plan, tasks = both
    assert len(plan.rows) == len(RUNS) and len({r["stack"] for r in plan.rows}) == 6
    assert any(r["run_id"].startswith("brokertree_recover") for r in plan.rows)
    assert [r["publications"] for r in tasks.rows if r["run_id"].startswith("paper004-")] == [0]
    found = []
    for name in KEYS:
        p_table = pq.read_table(out / "plan" / "metrics" / name)
        t_table = pq.read_table(out / "tasks" / "metrics" / name)
        assert t_table.num_rows > 0, name
        found += _differences(name, p_table, t_table)
    assert not found, "\n".join(found[:20]) + "\nreplay: " + "; ".join(map(_replay, RUNS))
    assert [r["run_id"] for r in plan.rows] == [r["run_id"] for r in tasks.rows]
    for p_row, t_row in zip(plan.rows, tasks.rows, strict=True):
        assert all(_same(v, t_row[k]) for k, v in p_row.items()), (p_row, t_row)


def test_the_metrics_exercise_what_each_engine_computes(both: Any) -> None:
    """The runs are chosen so that no metric is compared only as null against null."""
    _, plan, _ = both
    filled = {k for row in plan.rows for k, v in row.items() if v is not None}
    for metric in ("history_reliability", "latency_p99", "rmr_mean", "rmr_late",
                   "false_positive_rate", "load_gini", "diameter", "convergence_time",
                   "supervisor_messages_per_subscribe", "supervisor_messages_per_unsubscribe",
                   "config_requests", "filter_conjunctions_mean", "stalls",
                   "replayed"):  # fmt: skip
        assert metric in filled, metric
    assert any((r["expected"] or 0) > (r["delivered"] or 0) for r in plan.rows)


def _charts(analysis: Analysis) -> dict[str, list[tuple[Any, ...]]]:
    out = {}
    for name in ("cdf", "buckets", "load", "degrees", "per_second", "faults"):
        frame = analysis.data.get(name)
        if frame is not None:
            out[name] = sorted(tuple(r) for r in frame.itertuples(index=False))
    return out


def test_the_charts_are_drawn_from_the_same_numbers(both: Any) -> None:
    _, plan, tasks = both
    p_charts, t_charts = _charts(plan), _charts(tasks)
    assert (
        sorted(p_charts)
        == sorted(t_charts)
        == sorted(["cdf", "buckets", "load", "degrees", "per_second", "faults"])
    )
    for name, rows in p_charts.items():
        assert len(rows) == len(t_charts[name]), name
        for p_row, t_row in zip(rows, t_charts[name], strict=True):
            assert all(_same(a, b) for a, b in zip(p_row, t_row, strict=True)), (name, p_row)
    for key in ("bucket_seconds", "load_width", "labels", "stacks", "fault_summaries"):
        assert plan.data[key] == tasks.data[key], key


def _as_sweep_dataset(runs: list[Path], root: Path) -> Path:
    """The runs as one dataset partitioned by run_id, as pubmesh sweep writes it."""
    for run in runs:
        run_id = pq.read_table(run / "runs").column("run_id")[0].as_py()
        for table in SCHEMAS:
            if not (run / table).is_dir():
                continue
            part = root / table / f"run_id={run_id}"
            part.mkdir(parents=True)
            data = pq.read_table(run / table)
            pq.write_table(data.drop_columns(["run_id"]), part / "part-00000.parquet")
    return root


def test_a_sweep_dataset_gives_each_run_its_own_task_and_the_same_tables(
    spark: Any, runs: dict[str, Path], both: Any, tmp_path: Path
) -> None:
    out, _, _ = both
    picked = [runs["gossip"], runs["brokertree"]]
    dataset = _as_sweep_dataset(picked, tmp_path / "dataset")
    source = inspect(dataset)
    assert source.partitioned and len(source.run_ids) == 2 and in_tasks([source])
    got = analyze(spark, [source], tmp_path / "out", report=False, engine="tasks")
    assert {r["run_id"] for r in got.rows} == set(source.run_ids)
    found = []
    for name in KEYS:
        mine = pq.read_table(tmp_path / "out" / "metrics" / name)
        whole = pq.read_table(out / "plan" / "metrics" / name)
        wanted = whole.filter(pa.compute.is_in(whole["run_id"], pa.array(source.run_ids)))
        found += _differences(name, wanted, mine)
    assert not found, "\n".join(found[:20])


def test_auto_takes_tasks_for_small_runs_and_the_plan_above_the_limit(
    runs: dict[str, Path],
) -> None:
    source = inspect(runs["gossip"])
    assert in_tasks([source])
    assert not in_tasks([source], limit=source.size - 1)


def test_a_data_page_broken_under_a_valid_footer_is_named_in_one_line(
    spark: Any, runs: dict[str, Path], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs["gossip"], run)
    path = run / "deliveries" / "part-00000.parquet"
    data = bytearray(path.read_bytes())
    data[4:64] = bytes(range(60))  # the first page's header; the footer stays readable
    path.write_bytes(bytes(data))
    assert pq.read_schema(path).names == SCHEMAS["deliveries"].names  # inspect passes it
    with pytest.raises(TraceError) as raised:
        analyze(spark, [run], tmp_path / "out", report=False, engine="tasks")
    message = str(raised.value)
    assert str(path) in message and "cannot read" in message and "\n" not in message, message


def test_every_output_table_has_the_columns_the_plan_writes() -> None:
    from pubmesh.analysis.metrics import RUN_COLUMNS

    assert tuple(OUTPUT_SCHEMAS["runs"].names) == RUN_COLUMNS
