"""Running ``pubmesh cluster`` and reading its trace tables."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
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


def expected_pairs(run_dir: Path, since: float = 0.0) -> set[tuple[int, int]]:
    """(publication, subscriber) pairs a correct run delivers: subscribers subscribed at the
    publish time and still subscribed (alive) at the end, for publications from ``since``."""
    subscribers: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in table(run_dir, "subscriptions"):
        if row["t_end"] is None:
            subscribers[row["topic"]].append((row["node"], row["t_start"]))
    pairs = set()
    for pub in table(run_dir, "publications"):
        if pub["t"] >= since:
            for node, t_start in subscribers[pub["topic"]]:
                if t_start <= pub["t"]:
                    pairs.add((pub["pub_id"], node))
    return pairs


def missing_by_node(run_dir: Path, missing: set[tuple[int, int]]) -> dict[int, str]:
    """For a failure message: per subscriber, how many publications it missed and the
    publish times of the first and last of them (one node cut off for a while, or losses
    spread over many, tell different stories)."""
    at = {row["pub_id"]: row["t"] for row in table(run_dir, "publications")}
    by_node: dict[int, list[float]] = defaultdict(list)
    for pub_id, node in missing:
        by_node[node].append(at[pub_id])
    return {
        node: f"{len(times)} in t={min(times):.2f}..{max(times):.2f}"
        for node, times in sorted(by_node.items())
    }
