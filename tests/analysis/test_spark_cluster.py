"""``--master spark://...`` on a real Spark standalone cluster.

A master and one worker are started from the installed PySpark, bound to 127.0.0.1 on
ephemeral ports with their own scratch directory, and stopped in the fixture's finalizer.
``pubmesh sweep`` runs a tiny grid on the cluster (the simulations are tasks on the worker's
executor), ``pubmesh analyze`` re-analyses its traces there, and both must give what local
mode gives: each task's trace equals the trace of the same scenario run directly here, and
the metrics equal those local mode computes from the same traces.

Floating-point metrics are compared to 1e-9 relative: a sum's last bits depend on the order
in which partial aggregates are merged, and that order is the scheduler's on either master.
Everything else (counts, identifiers, integers, strings) must be equal.

Deselect with ``-m "not spark_cluster"`` (it starts three JVMs and takes about a minute).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pubmesh.analysis.job import analyze
from pubmesh.analysis.standalone import StandaloneCluster
from pubmesh.analysis.sweep import load_grid
from pubmesh.scenario.model import load_scenario
from pubmesh.sim.runner import run_scenario

ROOT = Path(__file__).resolve().parents[2]
# a hang guard, not a bound: the fixture starts the cluster's JVMs and runs two Spark analyses
# on the cluster and one locally (~4 min alone, longer beside the suite's other workers).
# The local reference runs on the suite's shared session, so this module is in its worker's
# group ("spark"): in a group of its own it started a second local JVM just for that
pytestmark = [
    pytest.mark.xdist_group("spark"),
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.timeout(1500),
]

GRID = f"""
seeds = [1]
base = "{ROOT / "scenarios" / "paper004_fail50.toml"}"
[grid]
"faults.0.fraction" = [0.0, 0.5]
[set]
"workload.publications" = 60
"workload.publish_start" = 30.0
"run.duration" = 50.0
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    directory = tmp_path_factory.mktemp("standalone")
    standalone = StandaloneCluster(workers=1, cores=2, memory="1g", directory=directory)
    standalone.start()
    yield standalone
    pids = standalone.pids()
    standalone.stop()
    for pid in pids:  # nothing left behind
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), pid


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _pubmesh(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PUBMESH_SPARK_MEMORY": "1g"},
        check=False,
    )
    assert done.returncode == 0, (
        f"pubmesh {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done


@pytest.fixture(scope="module")
def runs(cluster: StandaloneCluster, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The grid swept on the cluster and its traces re-analysed there; the same traces
    analysed in local mode (the tests' local[2] session)."""
    base = tmp_path_factory.mktemp("swept")
    grid = base / "grid.toml"
    grid.write_text(GRID)
    swept = _pubmesh(
        "sweep", str(grid), "--out", "on-cluster", "--quiet", "--master", cluster.url, cwd=base
    )
    traces = base / "on-cluster" / "traces"
    analysed = _pubmesh(
        "analyze", str(traces), "--out", "analysed-on-cluster", "--master", cluster.url, cwd=base
    )
    analyze(spark, [traces], base / "local", report=False)
    return base, swept, analysed


def test_sweep_and_analyze_on_a_standalone_cluster_equal_local_mode(
    cluster: StandaloneCluster, runs: Any, tmp_path: Path
) -> None:
    """One test, so one cluster and one set of runs whatever the scheduler does with modules
    (a module fixture shared by three tests was built twice in one suite run)."""
    base, swept, analysed = runs
    # the worker ran executors for two applications (sweep, analyze): the work was not local
    apps = sorted(p.name for p in (cluster.dir / "worker-0").iterdir() if p.is_dir())
    assert len(apps) == 2 and all(a.startswith("app-") for a in apps), apps
    assert "2 grid points × 1 seeds = 2 simulations" in swept.stdout
    assert (base / "on-cluster" / "report.html").exists()
    assert (base / "analysed-on-cluster" / "report.html").exists()
    assert "pubmesh analyze (2 runs)" in analysed.stdout
    assert len(pq.read_table(base / "on-cluster" / "metrics" / "grid")) == 2

    # each task's partition holds exactly the rows a direct local run of its scenario writes
    grid = load_grid(base / "grid.toml")
    for task in grid.tasks:
        result = run_scenario(
            load_scenario(task.scenario_path, list(task.overrides)), tmp_path / str(task.index)
        )
        for table in ("runs", "publications", "deliveries", "messages", "nodes"):
            direct = pq.read_table(tmp_path / str(task.index) / table).drop_columns(["run_id"])
            swept_rows = base / "on-cluster" / "traces" / table / f"run_id={result.run_id}"
            assert _rows(swept_rows) == _rows(direct), f"{table} differs; replay: {task.replay()}"

    # the per-run metrics both cluster jobs computed equal local mode's from the same traces
    local_metrics = base / "local" / "metrics"
    names = sorted(p.name for p in local_metrics.iterdir() if p.is_dir())
    assert "runs" in names, names
    for where in ("on-cluster", "analysed-on-cluster"):
        metrics = base / where / "metrics"
        found = sorted(p.name for p in metrics.iterdir() if p.is_dir() and p.name != "grid")
        assert found == names, where
        for name in names:
            _assert_same(_rows(metrics / name), _rows(local_metrics / name), f"{where}/{name}")


def _rows(source: Path | pa.Table) -> list[tuple[Any, ...]]:
    table = source if isinstance(source, pa.Table) else pq.read_table(source)
    columns = sorted(table.column_names)
    rows = [tuple(row[c] for c in columns) for row in table.select(columns).to_pylist()]
    return sorted(rows, key=repr)


def _assert_same(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], where: str) -> None:
    assert len(got) == len(want), f"{where}: {len(got)} rows, local mode has {len(want)}"
    for row, expected in zip(got, want, strict=True):
        for value, other in zip(row, expected, strict=True):
            if isinstance(value, float) and isinstance(other, float):
                same = (math.isnan(value) and math.isnan(other)) or math.isclose(
                    value, other, rel_tol=1e-9, abs_tol=1e-12
                )
            else:
                same = value == other
            assert same, f"{where}: {row} != {expected}"
