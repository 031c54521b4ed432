"""Running ``pubmesh cluster`` and reading its trace tables (which publications it delivered
where: :mod:`support.reliability`)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from support.netnode import node_env


def run_cluster(
    out: Path, *args: str, timeout: float = 150, prefix: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Run ``pubmesh cluster`` into ``out`` (``prefix``: e.g. :data:`support.netnode.FIRST`)
    and check that it ended well: no unexpected exit, a complete trace."""
    command = [
        *prefix,
        sys.executable,
        "-m",
        "pubmesh",
        "cluster",
        *args,
        "--out",
        str(out),
        "--quiet",
    ]
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


@contextlib.contextmanager
def common_umask() -> Iterator[None]:
    """The usual umask (022: files others may read) around a run, whatever the test runner's:
    a run must be private because pubmesh makes it so, not because the umask did."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def check_private(run_dir: Path) -> None:
    """A run directory holds what the wire encrypts: it and every directory in it are 0700,
    every trace file and run.json 0600, whatever the umask."""
    import stat

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(run_dir) == 0o700, f"{run_dir}: mode {mode(run_dir):04o}"
    files = [run_dir / "run.json", *run_dir.glob("*/*.parquet")]
    assert len(files) > 5, files
    for path in files:
        assert mode(path) == 0o600, f"{path}: mode {mode(path):04o}"
        assert mode(path.parent) == 0o700, f"{path.parent}: mode {mode(path.parent):04o}"
