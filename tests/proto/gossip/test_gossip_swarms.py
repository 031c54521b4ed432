"""Small gossip swarms converge to one component without any fault.

Many topics of 4–12 subscribers each, all joining within 1 s through the contact, links of
5–50 ms, nothing lost and nothing crashed (the harness: ``tests/support/swarms.py``). After three
shuffle periods every swarm must be one component of the subscribers' active views, and a
publication from one subscriber must reach every other. Without the Bridge rule
(:mod:`pubmesh.proto.gossip.hyparview`) about one swarm in 200 with active views of 3 stayed
split for good: every member's active view was full, so HyParView never asked for a link, and
shuffles walk active links only (seed 2, 2,000 topics: 10 split swarms with the rooted tree,
9 with Plumtree's; BENCHMARKS.md has the table).

``make test`` runs one seed at 1,000 topics with active views of 3 (where the splits were)
and 500 with the default views; ``make figures`` runs the whole figure, 2,000 topics, at five
seeds each (``bench/bench_swarms.py`` prints the same table).
"""

from __future__ import annotations

import dataclasses

import pytest

from support.swarms import VIEWS, run_swarms
from support.tiers import full

#: (view, tree, topics, seed): one seed here; the whole figure, five seeds of 2,000, is ``full``
CASES = [
    ("active 3", "rooted", 1000, 1),
    ("active 3", "plumtree", 1000, 1),
    ("default", "rooted", 500, 1),
    ("default", "plumtree", 500, 1),
    *(
        pytest.param(view, tree, 2000, seed, marks=full)
        for view in VIEWS
        for tree in ("rooted", "plumtree")
        for seed in range(1, 6)
    ),
]


@pytest.mark.parametrize(("view", "tree", "topics", "seed"), CASES)
def test_every_small_swarm_is_one_component_after_three_shuffle_periods(
    view: str, tree: str, topics: int, seed: int
) -> None:
    params = dataclasses.replace(VIEWS[view], tree=tree)
    outcomes = run_swarms(topics, seed, params)
    assert len(outcomes) == topics and all(4 <= o.subscribers <= 12 for o in outcomes)
    broken = [o for o in outcomes if not o.whole]
    replay = (
        f"seed {seed}; replay: pytest 'tests/proto/gossip/test_gossip_swarms.py::"
        f"test_every_small_swarm_is_one_component_after_three_shuffle_periods"
        f"[{view}-{tree}-{topics}-{seed}]'"
    )
    assert not broken, (
        f"{len(broken)} of {topics} swarms ({view}, {tree}) not whole after 3 shuffle periods, "
        f"e.g. {broken[:3]}; {replay}"
    )
