"""A stack is a folder plus a spec: the tiny test-only stack (tests/tinystack), which nothing
outside its folder names, is picked up by ``pubmesh stacks``, the simulator, the analysis and
(see tests/proto/test_stacks_generated.py, tests/net/test_net_cluster.py,
tests/analysis/test_demo.py) the generated tests and the demo. The suite loads it as a user would
load their own stack, through ``$PUBMESH_STACK_MODULES`` (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from pubmesh.analysis.demo import demo_scenarios, write_grid

TINY = Path(__file__).resolve().parents[1] / "tinystack"


def pubmesh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubmesh", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_pubmesh_stacks_lists_the_tiny_stack() -> None:
    done = pubmesh("stacks")
    assert done.returncode == 0, done.stderr
    [line] = [row for row in done.stdout.splitlines() if "tiny" in row]
    assert "available" in line


def test_without_the_module_variable_the_tiny_stack_is_unknown(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PUBMESH_STACK_MODULES"}
    done = pubmesh("sim", str(TINY / "tiny_demo.toml"), "--out", str(tmp_path / "r"), env=env)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "unknown stack 'tiny'" in line, line


def test_a_stack_module_that_does_not_import_is_one_line_and_exit_2() -> None:
    env = dict(os.environ, PUBMESH_STACK_MODULES="tinystack.spec,no_such_stack.spec")
    done = pubmesh("stacks", env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pubmesh: error: $PUBMESH_STACK_MODULES: cannot load stack module "
        "'no_such_stack.spec' (No module named 'no_such_stack')"
    ]


def test_the_demo_grid_takes_the_tiny_stacks_scenario(tmp_path: Path) -> None:
    assert demo_scenarios()["tiny"] == str(TINY / "tiny_demo.toml")
    grid = write_grid(tmp_path, [1]).read_text()
    assert str(TINY / "tiny_demo.toml") in grid


def test_the_simulator_runs_the_tiny_stack(tmp_path: Path) -> None:
    """``pubmesh sim`` of the tiny stack's scenario; its analysis (a row per run, charts in
    the report) is checked on the demo's runs of the same scenario
    (tests/analysis/test_demo.py), one Spark analysis for both."""
    done = pubmesh("sim", str(TINY / "tiny_demo.toml"), "--out", str(tmp_path / "run"), "--quiet")
    assert done.returncode == 0, done.stderr
    [run] = pq.read_table(tmp_path / "run" / "runs").to_pylist()
    assert run["stack"] == "tiny"
    assert pq.read_table(tmp_path / "run" / "publications").num_rows == 20
    assert pq.read_table(tmp_path / "run" / "deliveries").num_rows > 0
