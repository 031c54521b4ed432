"""Chord filter waves: the cost of N nodes joining at once through contact 0.

Every join changes some nodes' maintenance subscriptions (spec §7), and each change is a wave
of FilterUpdates; each update recomputes union filters (reduce, perfect merges). The figure is
CPU seconds for the first ``--steps`` handler calls of the join storm, with the memoized
``reduce``/perfect merge of pubmesh.proto.content and, in the same run as the reference, with
those caches bypassed (the code as it was before they were added).

    PYTHONPATH=src .venv/bin/python bench/bench_chord.py [--nodes 50] [--steps 30000]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from pubmesh.harness import HarnessError, PoolCluster
from pubmesh.proto.content import filters
from pubmesh.stacks.base import get_stack


def _storm(nodes: int, steps: int) -> tuple[float, int, float]:
    """CPU seconds, handler calls and simulated time of the first ``steps`` calls."""
    cluster = PoolCluster(get_stack("chord"), nodes, 1, step_limit=steps)
    start = time.process_time()
    with contextlib.suppress(HarnessError):  # the step limit: the cost of that many calls
        cluster.quiesce(60.0)
    return time.process_time() - start, cluster.steps, cluster.now


def _uncached(run: Callable[[], Any]) -> Any:
    """Run with reduce() and the perfect merges unmemoized (the reference)."""
    cached_reduce, cached_merge = filters._reduce, filters._perfect_merge
    filters._reduce = cached_reduce.__wrapped__  # type: ignore[assignment]
    filters._perfect_merge = cached_merge.__wrapped__  # type: ignore[assignment]
    try:
        return run()
    finally:
        filters._reduce, filters._perfect_merge = cached_reduce, cached_merge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--steps", type=int, default=30_000)
    args = parser.parse_args()
    cached = _storm(args.nodes, args.steps)
    reference = _uncached(lambda: _storm(args.nodes, args.steps))
    table = Table(title=f"chord join storm, {args.nodes} nodes, {args.steps:,} handler calls")
    for column in ("run", "CPU s", "handler calls", "simulated s"):
        table.add_column(column, justify="right")
    for name, (cpu, calls, now) in (("memoized", cached), ("reference (unmemoized)", reference)):
        table.add_row(name, f"{cpu:.1f}", f"{calls:,}", f"{now:.1f}")
    table.add_row("ratio", f"{reference[0] / cached[0]:.2f}x", "", "")
    Console().print(table)


if __name__ == "__main__":
    main()
