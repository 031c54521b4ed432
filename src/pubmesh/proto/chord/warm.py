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
from pubmesh.proto.chord.node import JOINED, ChordNode
from pubmesh.proto.content import Disjunction
from pubmesh.proto.core import NodeId, StackNode


def warm_start(nodes: Mapping[NodeId, StackNode], rng: random.Random, params: Any) -> None:
    """Rewrite started chord nodes into a legitimate overlay (module doc)."""
    chord = {i: n for i, n in sorted(nodes.items()) if isinstance(n, ChordNode)}
    if not chord:
        return
    ring = sorted((n.key, i) for i, n in chord.items())
    for i, node in chord.items():
        node._reset_overlay()
        node.state = JOINED
        node.fingers = (
            ideal_fingers(node.key, ring) if len(ring) > 1 else [None] * len(node.fingers)
        )
        node.edges = sorted(
            {f for f in node.fingers if f is not None}, key=lambda x: (node.d(x), x)
        )
        node.ends = node._range_ends(node.edges)
        node.order = node._send_order()
        node.succ = ideal_successors(node.key, ring, node.succ_len())
        if len(ring) > 1:
            node.pred_hint = ring[[r[1] for r in ring].index(i) - 1][1]
        node._maintenance_changed([])  # no in-neighbours yet: nothing is sent
    for i, node in chord.items():
        for v in node.edges:
            chord[v].in_ends[i] = node.ends[v]
    # clipped ends flow from in-neighbours down: settle them in order of range size
    changed = True
    while changed:
        changed = False
        for i, node in chord.items():
            for v in node.edges:
                clips = node._clips_for(v)
                if node.asked.get(v, ()) != clips:
                    node.asked[v] = clips
                    chord[v].in_clips[i] = clips
                    changed = True
    for node in chord.values():
        node.in_clips = {u: c for u, c in node.in_clips.items() if c}
        node.asked = {v: c for v, c in node.asked.items() if c}
    memo: dict[tuple[NodeId, int], Disjunction] = {}

    def h(v: NodeId, e: int) -> Disjunction:
        """The fixpoint filter of v for a range [key(v), e)."""
        found = memo.get((v, e))
        if found is not None:
            return found
        result = memo[(v, e)] = chord[v].union(e, h)
        return result

    for i, node in chord.items():
        for v in node.edges:
            node.out[v] = h(v, node.ends[v])
            clipped = {e: h(v, e) for e in node.asked.get(v, ())}
            if clipped:
                node.clips[v] = clipped
        for u in sorted(node.in_ends):
            for e in (node.in_ends[u], *node.in_clips.get(u, ())):
                node.sent[(u, e)] = h(i, e)
