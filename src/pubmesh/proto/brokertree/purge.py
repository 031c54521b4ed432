"""The brokertree node's depth-acknowledgement duty (Kazemzadeh & Jacobsen, "Reliable and
Highly Available Distributed Publish/Subscribe Service", §8; docs/protocols/brokertree.md §8):
every ``dack_period`` it sends each session peer the reports that changed (a newly active
session gets them all), and every ``purge_period`` it drops the publications that
``safeSeq`` says every recipient's path has, keeping per source the numbers still held so that
this node's own ``discarded`` values follow.

The reports themselves are :class:`~pubmesh.proto.brokertree.dack.DepthAcks`; this is the part
of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode` that trades and acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pubmesh.proto.brokertree.checkout import PUB, Entry
from pubmesh.proto.brokertree.dack import DepthAcks
from pubmesh.proto.brokertree.messages import Dack, DackEntry, SeqT, Vect
from pubmesh.proto.brokertree.shared import TreeOut, TreeState
from pubmesh.proto.brokertree.state import ACTIVATING, ACTIVE
from pubmesh.proto.core import NodeId

__all__ = ["Purger"]


@dataclass(slots=True)
class _Held:
    """Per source X, the X-seqs of held publications and of purged ones not yet reported
    (spec §8 'discarded')."""

    held: dict[SeqT, int] = field(default_factory=dict)
    purged: list[SeqT] = field(default_factory=list)


class Purger:
    """Dack sending and the purge of one node (module docstring)."""

    __slots__ = ("held", "reports", "s")

    def __init__(self, s: TreeState) -> None:
        self.s = s
        #: the reports kept and traded (pubmesh.proto.brokertree.dack)
        self.reports = DepthAcks(s.node_id)
        self.held: dict[NodeId, _Held] = {}

    def on_dack(self, message: Dack) -> None:
        """A peer's depth acknowledgements, kept (pubmesh.proto.brokertree.dack)."""
        self.reports.receive(message)

    def arrived_from(self, node: NodeId) -> None:
        """A higher ``node``-number arrived here: our arrival report of it changed."""
        self.reports.arrived_from(node)

    def hold(self, vin: Vect) -> None:
        """A publication entered the queue: count its numbers among the newest 2δ + 1 of its
        vector as held until it is purged."""
        for node, seq in vin[: 2 * self.s.delta + 1]:
            if seq is not None:
                held = self.held.setdefault(node, _Held())
                held.held[seq] = held.held.get(seq, 0) + 1

    def reports_for(
        self, peer: NodeId, pairs: set[tuple[NodeId, NodeId]]
    ) -> tuple[list[DackEntry], list[DackEntry]]:
        """What a Dack to ``peer`` carries about ``pairs`` (pubmesh.proto.brokertree.dack)."""
        if not pairs:
            return [], []
        assert self.s.view is not None
        return self.reports.reports_for(self.s.view, self.s.high, peer, pairs)

    def send_state(self, peer: NodeId, now: float, out: TreeOut) -> None:
        """A newly active session gets every report that applies to it."""
        if self.s.params.ack != "dack":
            return
        arrived, discarded = self.reports_for(peer, self.reports.all_pairs(self.s.high))
        if arrived or discarded:
            self.s.send(
                peer, Dack(sid=0, n=0, arrived=tuple(arrived), discarded=tuple(discarded)), now, out
            )

    def send(self, now: float, out: TreeOut) -> None:
        """Every dack_period: the reports that changed, to each session peer they apply to."""
        pairs = self.reports.take_changed()
        if not pairs or self.s.sessions is None:
            return
        for peer in self.s.sessions.open_peers():
            arrived, discarded = self.reports_for(peer, pairs)
            if arrived or discarded:
                self.s.count("dacks")
                self.s.send(
                    peer,
                    Dack(sid=0, n=0, arrived=tuple(arrived), discarded=tuple(discarded)),
                    now,
                    out,
                )

    def purge(self) -> None:
        """[P §8]: drop a publication once safeSeq(r) ≥ its number for every recipient and
        every active session has passed it."""
        if self.s.params.ack != "dack":
            return
        active = [link for link in self.s.links.values() if link.state == ACTIVE]
        if any(link.state == ACTIVATING for link in self.s.links.values()):
            return
        purged: list[Entry] = []
        for entry in list(self.s.queue.entries()):
            if entry.kind != PUB:
                continue
            if any(link.pointer <= entry.index for link in active):
                continue
            ok = True
            for r in entry.rcpt:
                assert self.s.view is not None
                safe = self.reports.safe_seq(self.s.view, r)
                if safe is None or safe < entry.lseq:
                    ok = False
                    break
            if ok:
                purged.append(entry)
        for entry in purged:
            self.s.queue.remove(entry)
            for node, seq in entry.vin[: 2 * self.s.delta + 1]:
                if seq is None:
                    continue
                held = self.held.get(node)
                if held is None:
                    continue
                count = held.held.get(seq, 0) - 1
                if count > 0:
                    held.held[seq] = count
                else:
                    held.held.pop(seq, None)
                held.purged.append(seq)
        if purged:
            self.s.count("purged", len(purged))
        self.update_discarded()

    def update_discarded(self) -> None:
        """discarded[X] (spec §8): the largest X-seq received such that every held message
        with an X entry at or below it has been purged."""
        for node in self.s.high.high:
            held = self.held.get(node)
            if held is None or not held.held:
                value = self.s.high.get(node)
                if held is not None:
                    held.purged.clear()
            else:
                lowest = min(held.held)
                below = [s for s in held.purged if s < lowest]
                held.purged = [s for s in held.purged if s >= lowest]
                value = max(below) if below else self.reports.discarded.get(node)
                known = self.reports.discarded.get(node)
                if value is not None and known is not None and value < known:
                    value = known
            if value is not None and value != self.reports.discarded.get(node):
                self.reports.set_discarded(node, value)
