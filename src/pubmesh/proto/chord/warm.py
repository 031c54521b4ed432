"""Warm start for the chord stack: a quiet, legitimate overlay built by construction.

``[init] overlay = "warm"`` (and the tests) use :func:`warm_start` instead of N joins: every
started node gets its successor list, fingers and ranges from the sorted live keys (spec §3),
its in-neighbours with their range ends and clipped ends, and every edge filter at the fixpoint
of h (Terpstra et al. §4.4). The filters are computed in increasing range size, each from filters
already computed (h for a range only uses filters of strictly smaller ranges), so the result
is exactly what the protocol's filter waves converge to, and Q holds
(:mod:`.legitimacy`; tests/proto/chord/test_chord_rules.py checks both claims).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from pubmesh.proto.chord.legitimacy import ideal_fingers, ideal_successors
from pubmesh.proto.chord.life import JOINED
from pubmesh.proto.chord.node import ChordNode
from pubmesh.proto.content import Disjunction
from pubmesh.proto.core import NodeId, StackNode


def warm_start(nodes: Mapping[NodeId, StackNode], rng: random.Random, params: Any) -> None:
    """Rewrite started chord nodes into a legitimate overlay (module doc)."""
    chord = {i: n for i, n in sorted(nodes.items()) if isinstance(n, ChordNode)}
    if not chord:
        return
    ring_keys = sorted((n.key, i) for i, n in chord.items())
    for i, node in chord.items():
        node._reset_overlay()
        s, ring = node.s, node.ring
        s.phase = JOINED
        s.fingers = (
            ideal_fingers(node.key, ring_keys) if len(ring_keys) > 1 else [None] * len(s.fingers)
        )
        s.edges = sorted({f for f in s.fingers if f is not None}, key=lambda x: (node.d(x), x))
        s.ends = ring._range_ends(s.edges)
        s.order = ring._send_order()
        s.succ = ideal_successors(node.key, ring_keys, s.succ_len())
        if len(ring_keys) > 1:
            s.pred_hint = ring_keys[[r[1] for r in ring_keys].index(i) - 1][1]
        # no in-neighbours yet: the loopback is computed, nothing is sent
        ring.maintenance_changed(node.routed())
    for i, node in chord.items():
        for v in node.s.edges:
            chord[v].s.in_ends[i] = node.s.ends[v]
    # clipped ends flow from in-neighbours down: settle them in order of range size
    changed = True
    while changed:
        changed = False
        for i, node in chord.items():
            for v in node.s.edges:
                clips = node.filters.clips_for(v)
                if node.filters.asked.get(v, ()) != clips:
                    node.filters.asked[v] = clips
                    chord[v].filters.in_clips[i] = clips
                    changed = True
    for node in chord.values():
        filters = node.filters
        filters.in_clips = {u: c for u, c in filters.in_clips.items() if c}
        filters.asked = {v: c for v, c in filters.asked.items() if c}
    memo: dict[tuple[NodeId, int], Disjunction] = {}

    def h(v: NodeId, e: int) -> Disjunction:
        """The fixpoint filter of v for a range [key(v), e)."""
        found = memo.get((v, e))
        if found is not None:
            return found
        result = memo[(v, e)] = chord[v].filters.union(e, h)
        return result

    for i, node in chord.items():
        filters, s = node.filters, node.s
        for v in s.edges:
            s.edge_filters[v] = h(v, s.ends[v])
            clipped = {e: h(v, e) for e in filters.asked.get(v, ())}
            if clipped:
                s.clipped[v] = clipped
        for u in sorted(s.in_ends):
            for e in (s.in_ends[u], *filters.in_clips.get(u, ())):
                filters.sent[(u, e)] = h(i, e)
