"""Graph figures of one overlay snapshot (run inside Spark tasks by ``applyInPandas``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


def _eccentricity(start: int, adjacency: dict[int, list[int]]) -> tuple[int, int, int]:
    """(eccentricity, farthest vertex, vertices reached) of a BFS from ``start``."""
    distance = {start: 0}
    queue = deque([start])
    far = start
    while queue:
        v = queue.popleft()
        for w in adjacency[v]:
            if w not in distance:
                distance[w] = distance[v] + 1
                if distance[w] > distance[far]:
                    far = w
                queue.append(w)
    return distance[far], far, len(distance)


def diameter(
    vertices: Iterable[int], edges: Iterable[tuple[int, int]], *, exact_limit: int = 1500
) -> tuple[int | None, bool, bool]:
    """(diameter, connected, exact) of an undirected graph.

    Exact (BFS from every vertex) up to ``exact_limit`` vertices; above it the largest
    eccentricity found by four double sweeps from spread-out vertices, a lower bound that is
    usually the diameter on overlays like these. ``None`` when the graph is disconnected.
    """
    adjacency: dict[int, list[int]] = {v: [] for v in vertices}
    for a, b in edges:
        adjacency.setdefault(a, []).append(b)
        adjacency.setdefault(b, []).append(a)
    order = sorted(adjacency)
    if not order:
        return None, False, True
    ecc, far, reached = _eccentricity(order[0], adjacency)
    if reached < len(order):
        return None, False, True
    if len(order) <= exact_limit:
        best = max([ecc, *(_eccentricity(v, adjacency)[0] for v in order[1:])])
        return best, True, True
    best = ecc
    for start in order[:: max(1, len(order) // 4)][:4]:
        _, far, _ = _eccentricity(start, adjacency)
        ecc, _, _ = _eccentricity(far, adjacency)
        best = max(best, ecc)
    return best, True, False
