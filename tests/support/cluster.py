"""Running ``pubmesh cluster`` and reading its trace tables (which publications it delivered
where: :mod:`support.reliability`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from support.netnode import node_env


def run_cluster(out: Path, *args: str, timeout: float = 150) -> dict[str, Any]:
    command = [sys.executable, "-m", "pubmesh", "cluster", *args, "--out", str(out), "--quiet"]
    result = subprocess.run(
        command, env=node_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"cluster failed ({result.returncode}); replay: {' '.join(command)}\n{result.stderr}"
    )
    info: dict[str, Any] = json.loads((out / "run.json").read_text())
    assert info["unexpected_exits"] == [], info
    assert info["trace_complete"] is True and info["trace_errors"] == {}, info
    return info


def table(run_dir: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(run_dir / name / "part-00000.parquet").to_pylist()
    return rows
