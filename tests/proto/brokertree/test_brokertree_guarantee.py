"""The loss classification of pubmesh.proto.brokertree.guarantee: a (publication, subscriber)
pair is within the δ guarantee iff every 2δ + 1 window of its publisher→subscriber tree path
holds at most δ crashed nodes (Kazemzadeh & Jacobsen §5.2 Def. 2, §5.7.1)."""

from __future__ import annotations

from pubmesh.proto.brokertree.guarantee import (
    TreePaths,
    classify_losses,
    cut_off,
    split_pairs,
    window_within,
)
from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.brokertree.topology import build_tree


def test_windows_of_two_delta_plus_one() -> None:
    line = list(range(12))
    # δ = 1: windows of 3 nodes, at most 1 crashed in each
    assert window_within(line, {2, 5, 8}, 1)
    assert not window_within(line, {2, 4}, 1)
    assert window_within(line, {2, 5}, 1)
    # δ = 3: windows of 7; 4 crashed spread over 8 nodes pass, over 7 do not
    assert window_within(line, {1, 3, 5, 8}, 3)
    assert not window_within(line, {1, 3, 5, 7}, 3)
    # a path shorter than 2δ + 1 is one window: δ + 1 crashed on it cannot be bypassed
    assert not window_within([0, 1, 2, 3, 4, 5], {1, 2, 3, 4}, 3)
    assert window_within([0, 1, 2, 3, 4, 5], {1, 2, 3}, 3)
    assert window_within([], {1}, 3) and window_within([7], set(), 1)
    # cut off: δ + 1 adjacent crashed nodes, which no bypass reaches across
    assert cut_off(line, {3, 4}, 1) and not cut_off(line, {3, 5}, 1)
    assert cut_off(line, {1, 2, 3, 4}, 3) and not cut_off(line, {1, 3, 5, 7}, 3)


def test_pairs_split_over_the_generated_tree() -> None:
    params = BrokerTreeParams(brokers=8, delta=1, layout="chain3", core_fanout=2)
    tree = build_tree(params, 20)
    paths = TreePaths(tree)
    # the chain tree of test_brokertree_rules.py: 3 - 0 - 1 - 2 - 7, client 18 on 3, 8 on 2
    assert paths.path(18, 8) == [18, 3, 0, 1, 2, 8]
    assert paths.path(8, 8) == [8]
    publisher_of = {1: 18, 2: 8}
    pairs = [(1, 8), (2, 18), (1, 12), (2, 8)]
    split = split_pairs(pairs, publisher_of, tree, {0, 1}, 1)
    assert split.beyond == [(1, 8), (2, 18), (1, 12)]  # 0 and 1 adjacent on their paths
    assert split.cut == split.beyond
    assert split.within == [(2, 8)]
    split = split_pairs(pairs, publisher_of, paths, {0, 2}, 1)
    assert split.within == [(1, 12), (2, 8)] and split.beyond == [(1, 8), (2, 18)]
    report = classify_losses(pairs, [(1, 8), (2, 8)], publisher_of, tree, {0, 2}, 1)
    assert report.expected_within == 2 and report.expected_beyond == 2
    assert report.expected_cut == 0  # 0 and 2 are not adjacent
    assert report.lost_within == ((2, 8),) and report.lost_beyond == ((1, 8),)
    assert report.reliability_within == 0.5 and report.reliability_beyond == 0.5
