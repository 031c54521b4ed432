"""Depth acknowledgements (Kazemzadeh & Jacobsen, "Reliable and Highly Available Distributed
Publish/Subscribe Service", §8; docs/protocols/brokertree.md §8): the reports a node keeps and
trades so that it may purge a publication without a Conf from every hop.

A node reports, for each pair ⟨A, B⟩ of nodes within δ + 1 hops across one of its sessions,
the highest B-number A has received (``arrived``) and the largest B-number below which A holds
nothing any more (``discarded``): its own values when A is itself, otherwise the latest report
it has from A. :class:`DepthAcks` holds those reports, which of them changed since the last
``Dack``, and this node's own ``discarded`` values; it answers what a ``Dack`` to a peer carries
(:meth:`DepthAcks.reports_for`) and ``safeSeq`` (:meth:`DepthAcks.safe_seq`), from which the
node's purge decides. Sending (when, to which sessions) and purging (what the queue holds) are
:class:`~pubmesh.proto.brokertree.purge.Purger`'s; the tree's shape
(:class:`~pubmesh.proto.brokertree.view.View`) and the node's highest numbers
(:class:`~pubmesh.proto.brokertree.seqvect.HighSeq`) are passed in, as they change under it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pubmesh.proto.brokertree.messages import Dack, DackEntry, SeqT
from pubmesh.proto.brokertree.seqvect import HighSeq
from pubmesh.proto.brokertree.view import View
from pubmesh.proto.brokertree.wire import norm_seq, valid_node, valid_seq
from pubmesh.proto.core import NodeId

__all__ = ["DepthAcks"]

Pair = tuple[NodeId, NodeId]


class DepthAcks:
    """The dack state of one node (module docstring)."""

    __slots__ = (
        "_changed_arrived",
        "_changed_discarded",
        "discarded",
        "me",
        "rep_arrived",
        "rep_discarded",
    )  # fmt: skip

    def __init__(self, me: NodeId) -> None:
        self.me = me
        #: reports ⟨A, B:seq⟩ received: A -> B -> the highest B-number A has
        self.rep_arrived: dict[NodeId, dict[NodeId, SeqT]] = {}
        #: ... and A -> B -> the B-number below which A holds nothing
        self.rep_discarded: dict[NodeId, dict[NodeId, SeqT]] = {}
        #: this node's own discarded[X] (set by the node's purge bookkeeping)
        self.discarded: dict[NodeId, SeqT] = {}
        self._changed_arrived: set[Pair] = set()
        self._changed_discarded: set[Pair] = set()

    # ------------------------------------------------------------------ what changed
    def arrived_from(self, node: NodeId) -> None:
        """A higher ``node``-number arrived here: our ⟨me, node⟩ arrival report changed."""
        self._changed_arrived.add((self.me, node))

    def set_discarded(self, node: NodeId, value: SeqT) -> None:
        """Our discarded[``node``] is now ``value``."""
        self.discarded[node] = value
        self._changed_discarded.add((self.me, node))

    def take_changed(self) -> set[Pair]:
        """The pairs whose reports changed since the last call (both kinds), forgotten now."""
        pairs = self._changed_arrived | self._changed_discarded
        self._changed_arrived = set()
        self._changed_discarded = set()
        return pairs

    def receive(self, message: Dack) -> None:
        """Take a peer's reports: each row kept if well formed, not about our own numbers,
        and newer than what we have."""
        for table, changed, rows in (
            (self.rep_arrived, self._changed_arrived, message.arrived),
            (self.rep_discarded, self._changed_discarded, message.discarded),
        ):
            for row in rows:
                if type(row) is not tuple or len(row) != 3:
                    continue
                a, b, seq = row
                if not (valid_node(a) and valid_node(b) and valid_seq(seq)) or a == self.me:
                    continue
                seq = norm_seq(seq)
                known = table.setdefault(a, {}).get(b)
                if known is None or seq > known:
                    table[a][b] = seq
                    changed.add((a, b))

    # ------------------------------------------------------------------ what goes where
    def pair_goes(self, view: View, peer: NodeId, a: NodeId, b: NodeId) -> bool:
        """⟨A, B⟩ goes to ``peer`` if A is on our side, B on the peer's, and they are within
        δ + 1 hops of each other [P §8]."""
        if a == b:
            return False
        path_b = view.path(b)
        if b != peer and peer not in path_b:
            return False
        if a != self.me and (peer in view.path(a) or a in view.between(peer)):
            return False
        return view.distance(a, b) <= view.reach

    def report(self, high: HighSeq, a: NodeId, b: NodeId) -> tuple[SeqT | None, SeqT | None]:
        """(arrived, discarded) of ⟨A, B⟩: our own values when A is this node."""
        if a == self.me:
            return high.get(b), self.discarded.get(b, high.get(b))
        return self.rep_arrived.get(a, {}).get(b), self.rep_discarded.get(a, {}).get(b)

    def reports_for(
        self, view: View, high: HighSeq, peer: NodeId, pairs: Iterable[Pair]
    ) -> tuple[list[DackEntry], list[DackEntry]]:
        """The ``arrived`` and ``discarded`` rows of a Dack to ``peer`` about ``pairs``."""
        arrived: list[DackEntry] = []
        discarded: list[DackEntry] = []
        for a, b in sorted(set(pairs)):
            if not self.pair_goes(view, peer, a, b):
                continue
            arr, dis = self.report(high, a, b)
            if arr is not None:
                arrived.append((a, b, arr))
            if dis is not None:
                discarded.append((a, b, dis))
        return arrived, discarded

    def all_pairs(self, high: HighSeq) -> set[Pair]:
        """Every pair we could report on (a newly active session gets them all)."""
        pairs = {(self.me, b) for b in high.high}
        for a, row in self.rep_arrived.items():
            pairs.update((a, b) for b in row)
        for a, row in self.rep_discarded.items():
            pairs.update((a, b) for b in row)
        return pairs

    # ------------------------------------------------------------------ safeSeq
    def safe_seq(self, view: View, target: NodeId) -> SeqT | None:
        """safeSeq [P §8]: the larger of the lowest arrival of our numbers reported by every
        node on the path to ``target`` (once all have reported) and the highest discard any
        of them reported."""
        me = self.me
        lowest: SeqT | None = None
        complete = True
        highest: SeqT | None = None
        for node in view.path(target):
            arr = self.rep_arrived.get(node, {}).get(me)
            if arr is None:
                complete = False
            elif lowest is None or arr < lowest:
                lowest = arr
            dis = self.rep_discarded.get(node, {}).get(me)
            if dis is not None and (highest is None or dis > highest):
                highest = dis
        best = lowest if complete else None
        if highest is not None and (best is None or highest > best):
            best = highest
        return best
