"""The quiet predicate Q of the chord stack (docs/protocols/chord.md §11; Terpstra et al. §4.2).

Over the live, joined nodes (those that have not left):

* **Q1** each successor list holds the first min(L, N−1) live successors, and p(u) is the set
  of §3 over the live keys: p_k(u) = the first node at least D_k = 2^(m−k) away.
* **Q2** for every u and v ∈ p(u)∖u, v stores the end of r_u(v) that u computes; v stores no
  other in-neighbour; no edge is pending and no RespChange is unacknowledged.
* **Q3** (Terpstra et al. §4.2, the invariant that makes publish correct): for every u,
  v ∈ p(u)∖u and w ∈ p(v) with w = v or d(v,w) < |r_u(v)|, every conjunction of f(v→w) is
  covered by one of f(u→v) (f(v→v) is v's loopback).
* **Q4** (implied by Q3, checked for the diagnostics): each subscription of every y with
  key(y) ∈ r_u(v) is covered by f(u→v).

:func:`violations` lists what fails, in words (the tests print it); :func:`is_legitimate` is
the stack's legitimacy predicate, so ``convergence_time`` and the checks table work.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

from pubmesh.proto.chord.keys import SIZE, M, dist, finger_offset
from pubmesh.proto.chord.life import JOINED, JOINING
from pubmesh.proto.chord.node import ChordNode
from pubmesh.proto.content import covers_any
from pubmesh.proto.core import NodeId, StackNode


def ideal_fingers(key: int, ring: list[tuple[int, NodeId]]) -> list[NodeId | None]:
    """p_k for k = 1…m over ``ring`` (sorted (key, id) pairs), None where undefined."""
    keys = [k for k, _ in ring]
    out: list[NodeId | None] = []
    for k in range(1, M + 1):
        target = (key + finger_offset(k)) % SIZE
        i = bisect_left(keys, target)
        best = None
        for j in (i % len(ring), 0):
            candidate_key, candidate = ring[j]
            if candidate_key != key and dist(key, candidate_key) >= finger_offset(k):
                best = candidate
                break
        out.append(best)
    return out


def ideal_successors(key: int, ring: list[tuple[int, NodeId]], length: int) -> list[NodeId]:
    keys = [k for k, _ in ring]
    i = bisect_left(keys, key)
    n = len(ring)
    result = []
    for step in range(1, n):
        result.append(ring[(i + step) % n][1])
    return result[: min(length, n - 1)]


def violations(nodes: Mapping[NodeId, StackNode], *, limit: int = 10) -> list[str]:
    """What keeps the live chord nodes from Q (empty: Q holds)."""
    live = {
        i: node
        for i, node in sorted(nodes.items())
        if isinstance(node, ChordNode) and node.state in (JOINED, JOINING)
    }
    found: list[str] = []

    def fail(text: str) -> bool:
        found.append(text)
        return len(found) >= limit

    for i, node in live.items():
        if node.state != JOINED and fail(f"{i}: still {node.state}"):
            return found
    if found:
        return found
    ring = sorted((node.key, i) for i, node in live.items())
    for i, node in live.items():
        want_fingers = ideal_fingers(node.key, ring) if len(ring) > 1 else [None] * M
        want_edges = sorted(
            {f for f in want_fingers if f is not None}, key=lambda x: (node.d(x), x)
        )
        edges, succ = node.s.edges, node.s.succ
        if edges != want_edges and fail(f"Q1 {i}: edges {edges} != {want_edges}"):
            return found
        want_succ = ideal_successors(node.key, ring, node.s.succ_len())
        if succ != want_succ and fail(f"Q1 {i}: list {succ} != {want_succ}"):
            return found
    edges_into: dict[NodeId, list[NodeId]] = {i: [] for i in live}
    for u, sender in live.items():
        for v in sender.s.ends:
            if v in edges_into:
                edges_into[v].append(u)
    #: (filter, covered filter) pairs already checked: filters are shared tuples (the warm
    #: start's memo, unchanged updates), and a set lookup settles conjunctions present as such
    checked: set[tuple[int, int]] = set()
    for i, node in live.items():
        filters, ends = node.filters, node.s.ends
        if filters.pending and fail(f"Q2 {i}: pending edges {sorted(filters.pending)}"):
            return found
        if filters.rc_unacked and fail(
            f"Q2 {i}: unacked RespChange to {sorted(filters.rc_unacked)}"
        ):
            return found
        incoming = sorted(edges_into[i])
        if sorted(node.s.in_ends) != incoming and fail(
            f"Q2 {i}: stores in-neighbours {sorted(node.s.in_ends)}, edges come from {incoming}"
        ):
            return found
        for v in node.s.edges:
            other = live.get(v)
            if other is None:
                if fail(f"Q1 {i}: edge to {v}, not live"):
                    return found
                continue
            theirs = other.filters
            if other.s.in_ends.get(i) != ends[v] and fail(
                f"Q2 {v}: stores end {other.s.in_ends.get(i)} for {i}, which says {ends[v]}"
            ):
                return found
            clips = filters.clips_for(v)
            if (filters.asked.get(v, ()) != clips or theirs.in_clips.get(i, ()) != clips) and fail(
                f"Q2 {i}->{v}: clipped ends asked {filters.asked.get(v, ())}, stored "
                f"{theirs.in_clips.get(i, ())}, needed {clips}"
            ):
                return found
            for e in (ends[v], *clips):
                if e != ends[v] and e not in node.s.clipped.get(v, {}):
                    if fail(f"Q2 {i}->{v}: no clipped filter for end {e}"):
                        return found
                    continue
                mine = node.s.edge_filter(v, e)
                below = [(w, other.s.edge_filter(w, needed)) for w, needed in theirs.below(e)]
                present = set(mine)
                for w, f in [(v, theirs.loop), *below]:
                    if (id(mine), id(f)) in checked:
                        continue
                    checked.add((id(mine), id(f)))
                    for conj in f:
                        if (
                            conj not in present
                            and not covers_any(mine, conj)
                            and fail(
                                f"Q3 {i}->{v} (end {e}): does not cover {conj.text} of f({v}->{w})"
                            )
                        ):
                            return found
    return found


def is_legitimate(nodes: Mapping[NodeId, StackNode]) -> bool:
    """Q (module doc): the stack's legitimacy predicate."""
    return not violations(nodes, limit=1)
