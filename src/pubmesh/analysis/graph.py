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

    Exact (a BFS from every vertex, bit-parallel) up to ``exact_limit`` vertices; above it
    the largest eccentricity found by four double sweeps from spread-out vertices, a lower
    bound that is usually the diameter on overlays like these. ``None`` when the graph is
    disconnected.
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
        return _all_pairs_diameter(order, adjacency), True, True
    best = ecc
    for start in order[:: max(1, len(order) // 4)][:4]:
        _, far, _ = _eccentricity(start, adjacency)
        ecc, _, _ = _eccentricity(far, adjacency)
        best = max(best, ecc)
    return best, True, False


def _all_pairs_diameter(order: list[int], adjacency: dict[int, list[int]]) -> int:
    """The exact diameter of a connected graph: a BFS from every vertex at once, bit-parallel.
    Vertex i's set of vertices within k hops is an integer bitset; the sets within k + 1 hops
    are each vertex's set OR its neighbours'. The diameter is the first k at which every set
    is every vertex. Python's integers do the ORs in C, a machine word per 64 vertices, so a
    1,000-vertex overlay takes a few thousand ORs per hop instead of 1,000 Python BFSs (the
    same value: each k-hop set is what the BFS from that vertex reaches in k hops)."""
    index = {v: i for i, v in enumerate(order)}
    neighbours = [[index[w] for w in adjacency[v]] for v in order]
    full = (1 << len(order)) - 1
    reach = [1 << i for i in range(len(order))]
    hops = 0
    while any(r != full for r in reach):
        hops += 1
        previous = reach
        reach = []
        for i, ws in enumerate(neighbours):
            r = previous[i]
            for w in ws:
                r |= previous[w]
            reach.append(r)
    return hops
