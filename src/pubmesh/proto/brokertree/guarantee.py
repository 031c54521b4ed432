"""Which lost (publication, subscriber) pairs the δ-fault-tolerance guarantee covers.

Kazemzadeh & Jacobsen, *Highly Available Distributed Publish/Subscribe Systems* (Kazemzadeh &
Jacobsen) §3.4 and §5.2 (Definition 2): a propagation is *legitimate* iff every 2δ + 1 consecutive
nodes of its path hold at least δ + 1 that forwarded it; §5.7.1: "in order to violate the legitimacy
property, these failures must be within" a chain of 2δ + 1. So a pair whose tree path from the
publisher to the subscriber has at most δ crashed brokers in every window of 2δ + 1 consecutive
nodes can always be reached by a legitimate copy (no more than δ adjacent nodes skipped, every
bypass within the δ + 1 hops of a topology map) and must be delivered; a pair with a window holding
more than δ crashed ones is *beyond* the guarantee: its copies would be illegitimate (or, with δ + 1
adjacent crashes, have no path at all) and the paper trades their liveness for safety (§5.5: "nodes
stop to propagate messages if they become illegitimate").

Pure functions over the run's tree (:func:`~.topology.build_tree`), its crash set and the
pairs: the tests and the SRDS'11 benchmark use them to split the expected-but-missing pairs.
A path shorter than 2δ + 1 is one window (δ + 1 adjacent crashes on a short path are beyond
the guarantee too: nothing can bypass them).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pubmesh.proto.brokertree.topology import TopologyMap, Tree
from pubmesh.proto.core import NodeId

Pair = tuple[int, NodeId]


def window_within(path: Sequence[NodeId], crashed: Collection[NodeId], delta: int) -> bool:
    """True iff every window of min(2δ + 1, len(path)) consecutive nodes of ``path`` holds at
    most δ crashed nodes (Kazemzadeh & Jacobsen §5.2 Definition 2, read on the crash set)."""
    width = min(2 * delta + 1, len(path))
    if width == 0:
        return True
    down = [1 if node in crashed else 0 for node in path]
    count = sum(down[:width])
    if count > delta:
        return False
    for i in range(width, len(down)):
        count += down[i] - down[i - width]
        if count > delta:
            return False
    return True


def cut_off(path: Sequence[NodeId], crashed: Collection[NodeId], delta: int) -> bool:
    """True iff ``path`` has δ + 1 adjacent crashed nodes: no copy can cross them at all, since a
    bypass reaches at most δ + 1 hops, the radius of a topology map (Kazemzadeh & Jacobsen §2.2,
    §3.3; a large fragment, §3.2), legitimate or not."""
    run = 0
    for node in path:
        run = run + 1 if node in crashed else 0
        if run > delta:
            return True
    return False


class TreePaths:
    """Tree paths between nodes of a :class:`~.topology.Tree`: each source's whole-tree map
    (:meth:`~.topology.Tree.map_of` with no radius limit), made once and kept."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._maps: dict[NodeId, TopologyMap] = {}

    def path(self, source: NodeId, target: NodeId) -> list[NodeId]:
        """The nodes from ``source`` to ``target``, both included (KeyError if either is not
        in the tree)."""
        whole = self._maps.get(source)
        if whole is None:
            whole = self._maps[source] = self.tree.map_of(source, radius=len(self.tree.adj))
        return [source, *whole.path(target)]


@dataclass
class PairSplit:
    """Pairs split by the guarantee: ``within`` (every 2δ + 1 window of the path has at most δ
    crashed nodes) and ``beyond``."""

    within: list[Pair] = field(default_factory=list)
    beyond: list[Pair] = field(default_factory=list)
    #: the pairs beyond it whose path is cut off (:func:`cut_off`)
    cut: list[Pair] = field(default_factory=list)


def split_pairs(
    pairs: Iterable[Pair],
    publisher_of: Mapping[int, NodeId],
    tree: Tree | TreePaths,
    crashed: Collection[NodeId],
    delta: int,
) -> PairSplit:
    """Split (pub_id, subscriber) pairs by whether the tree path from the publication's
    publisher to the subscriber is within the guarantee (:func:`window_within`)."""
    paths = tree if isinstance(tree, TreePaths) else TreePaths(tree)
    down = frozenset(crashed)
    out = PairSplit()
    verdict: dict[tuple[NodeId, NodeId], tuple[bool, bool]] = {}
    for pub_id, subscriber in pairs:
        key = (publisher_of[pub_id], subscriber)
        known = verdict.get(key)
        if known is None:
            path = paths.path(*key)
            known = verdict[key] = (window_within(path, down, delta), cut_off(path, down, delta))
        (out.within if known[0] else out.beyond).append((pub_id, subscriber))
        if known[1]:
            out.cut.append((pub_id, subscriber))
    return out


@dataclass(frozen=True)
class LossReport:
    """Expected and missing pairs on each side of the guarantee."""

    expected_within: int
    expected_beyond: int
    lost_within: tuple[Pair, ...]
    lost_beyond: tuple[Pair, ...]
    #: expected pairs whose path has δ + 1 adjacent crashed nodes (all beyond the guarantee)
    expected_cut: int = 0

    @property
    def reliability_within(self) -> float:
        """Delivered share of the pairs within the guarantee (1.0 with none)."""
        if not self.expected_within:
            return 1.0
        return 1.0 - len(self.lost_within) / self.expected_within

    @property
    def reliability_beyond(self) -> float:
        if not self.expected_beyond:
            return 1.0
        return 1.0 - len(self.lost_beyond) / self.expected_beyond


def classify_losses(
    expected: Iterable[Pair],
    missing: Iterable[Pair],
    publisher_of: Mapping[int, NodeId],
    tree: Tree | TreePaths,
    crashed: Collection[NodeId],
    delta: int,
) -> LossReport:
    """Split the expected pairs and the expected-but-missing ones by the guarantee."""
    paths = tree if isinstance(tree, TreePaths) else TreePaths(tree)
    exp = split_pairs(expected, publisher_of, paths, crashed, delta)
    lost = split_pairs(missing, publisher_of, paths, crashed, delta)
    return LossReport(
        expected_within=len(exp.within),
        expected_beyond=len(exp.beyond),
        lost_within=tuple(lost.within),
        lost_beyond=tuple(lost.beyond),
        expected_cut=len(exp.cut),
    )
