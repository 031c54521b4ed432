"""Was every expected publication delivered to every subscriber, and once: the (publication,
subscriber) pairs of a finished run, read from its trace tables with pyarrow (a simulated run's
directory or a gathered ``pubmesh cluster`` one: ``RUN_DIR/<table>/part-00000.parquet``).

:func:`expected_pairs` is the tests' one reading of which pairs a correct run delivers, for
topic subscriptions; :func:`delivered_pairs` and :func:`delivery_counts` what it delivered
(missing: ``expected - delivered``; duplicates: a count above 1); :func:`reliability` the share
delivered; :func:`missing_by_node` says who missed what, for a failure message.

Content-based expected sets from a live :class:`~pubmesh.sim.engine.Simulation` (filters
matched, the simulator's alive set) are per publication in :mod:`support.figures` and, for the
brokertree figures, in :mod:`support.btfigures`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

#: (pub_id, node)
Pair = tuple[int, int]


def _rows(run_dir: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(run_dir / name).to_pylist()
    return rows


def expected_pairs(
    run_dir: Path, since: float = 0.0, *, history: bool = False, exclude: Collection[int] = ()
) -> set[Pair]:
    """(publication, subscriber) pairs a correct run delivers: subscribers subscribed at the
    publish time and still subscribed (alive) at the end, for the publications issued at or
    after ``since``. With ``history`` (history_reliability), the subscribers still subscribed at
    the end whenever they subscribed. Nodes in ``exclude`` expect nothing (with
    :func:`crashed_or_left`, a node that crashed and recovered, subscribed again, is left out
    too)."""
    subscribers: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for row in _rows(run_dir, "subscriptions"):
        if row["t_end"] is None and row["node"] not in exclude:
            subscribers[row["topic"]].append((row["node"], row["t_start"]))
    pairs = set()
    for pub in _rows(run_dir, "publications"):
        if pub["t"] >= since:
            for node, t_start in subscribers[pub["topic"]]:
                if history or t_start <= pub["t"]:
                    pairs.add((pub["pub_id"], node))
    return pairs


def crashed_or_left(run_dir: Path) -> set[int]:
    """The nodes with a crash or leave event in the run."""
    return {r["node"] for r in _rows(run_dir, "nodes") if r["event"] in ("crash", "leave")}


def delivery_counts(run_dir: Path) -> Counter[Pair]:
    """How many times each (publication, node) pair was delivered."""
    return Counter((row["pub_id"], row["node"]) for row in _rows(run_dir, "deliveries"))


def delivered_pairs(run_dir: Path) -> set[Pair]:
    return set(delivery_counts(run_dir))


def reliability(expected: Collection[Pair], delivered: Iterable[Pair]) -> float:
    """The share of the expected pairs delivered (1.0 when none is expected)."""
    return len(set(expected).intersection(delivered)) / max(len(expected), 1)


def publish_times(run_dir: Path) -> dict[int, float]:
    return {row["pub_id"]: row["t"] for row in _rows(run_dir, "publications")}


def missing_by_node(run_dir: Path, missing: Iterable[Pair]) -> dict[int, str]:
    """For a failure message: per subscriber, how many publications it missed and the
    publish times of the first and last of them (one node cut off for a while, or losses
    spread over many, tell different stories)."""
    at = publish_times(run_dir)
    by_node: dict[int, list[float]] = defaultdict(list)
    for pub_id, node in missing:
        by_node[node].append(at[pub_id])
    return {
        node: f"{len(times)} in t={min(times):.2f}..{max(times):.2f}"
        for node, times in sorted(by_node.items())
    }
