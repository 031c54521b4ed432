"""The brokertree node's recovery (Kazemzadeh & Jacobsen, *Highly Available Distributed
Publish/Subscribe Systems* §4; docs/protocols/brokertree.md §7): the LSeq handshake on every
activation [P §4.2.1], the subscription summaries each side sends the other, a restarted
broker's whole-table transfer and the publications it holds until then (Lemma 2), and the
partition entries of large fragments [P §4.2.2].

A part of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode`, which composes it; the
module essay of :mod:`pubmesh.proto.brokertree.node` says where this deviates from the spec
(a whole table from a complete peer; every tuple not beyond the peer, not only those after its
lSeq).

The node calls it: an LSeq's outcome (:data:`Handshake`) tells the node whether the link it
activated gets the depth-ack state, and :meth:`Recovery.update`, :meth:`Recovery.on_summary`
hand back the publications held until the table was whole (:data:`Released`), which the node
takes as it takes any (``BrokerTreeNode.on_data``).
"""

from __future__ import annotations

from typing import Any, Literal

from pubmesh.proto.brokertree.messages import (
    LSeq,
    OriginT,
    ParInfoT,
    Pub,
    SubSummary,
    TopoSummary,
    TupleT,
)
from pubmesh.proto.brokertree.seqvect import shifted
from pubmesh.proto.brokertree.shared import TreeOut, TreeState
from pubmesh.proto.brokertree.state import ACTIVATING, ACTIVE
from pubmesh.proto.brokertree.table import SubTuple
from pubmesh.proto.brokertree.wire import (
    norm_origin,
    norm_parinfo,
    norm_seq,
    norm_vect,
    predicate_text,
    valid_origin,
    valid_parinfo,
    valid_seq,
)
from pubmesh.proto.core import NodeId, TraceRecord

__all__ = ["Handshake", "Recovery", "Released"]

#: what an LSeq was to the node (:meth:`Recovery.on_lseq`): an answer to an activation since
#: replaced (nothing more to do), a request answered, or the answer that activated the link
Handshake = Literal["stale", "answered", "activated"]
#: publications held while the table was not whole, handed back in arrival order once it is
Released = list[tuple[NodeId, Pub]]

#: tuples per SubSummary frame
_CHUNK = 256


class Recovery:
    """Handshake, summaries and whole-table recovery of one node (module docstring)."""

    __slots__ = ("answered", "early", "owed", "peer_recovering", "s")

    def __init__(self, s: TreeState) -> None:
        self.s = s
        #: peers that answered the activation handshake, and whether each knew us before
        self.answered: dict[NodeId, bool] = {}
        #: recovering peers that asked for a whole table, owed once ours is whole
        self.owed: set[NodeId] = set()
        self.peer_recovering: set[NodeId] = set()
        #: publications received before the table was whole, in arrival order
        self.early: list[tuple[NodeId, Pub]] = []

    def hold_early(self, src: NodeId, message: Pub) -> None:
        """A publication that came before the table was whole: held, in arrival order, until
        it is (Lemma 2; :meth:`set_whole` hands it back)."""
        self.early.append((src, message))

    def forget(self, peer: NodeId) -> None:
        """The session with ``peer`` went down: its handshake starts over."""
        self.answered.pop(peer, None)
        self.peer_recovering.discard(peer)

    def on_lseq(self, src: NodeId, message: LSeq, now: float, out: TreeOut) -> Handshake:
        """[P §4.2.1]: the activating side asks; the other answers with what it holds of the
        asker, and each sends the other the tuples it may lack (spec §7.2: "either side may
        lack"). A restarted node asks for, and gets, a whole table (ours: the share of
        [P §4.2.1] assumes the receiver kept what it had)."""
        self.answered[src] = bool(message.knew)
        if message.recovering:
            self.peer_recovering.add(src)
        else:
            self.peer_recovering.discard(src)
        if message.request:
            reply = self.s.lseq_message(src, request=False, gen=message.gen)
            if self.s.send(src, reply, now, out):
                self.send_summary(src, now, out)
            return "answered"
        link = self.s.links.get(src)
        if link is None or link.state != ACTIVATING or message.gen != link.gen:
            return "stale"  # an answer to an activation since replaced
        link.state = ACTIVE
        link.pointer = self.s.queue.head
        link.stalled_since = -1.0
        self.send_summary(src, now, out)
        return "activated"

    def update(self, now: float, out: TreeOut) -> Released:
        """None → True when a peer knew an older us (we lost a table). None → False after a
        probe period with nobody who did and no whole table offered: a first start, when
        every broker starts empty at once (ours [R]: a restarted node does not know it is
        one until someone tells it, and its own neighbours may have restarted with it)."""
        if self.s.recovering is not None or not self.s.is_broker:
            return []
        if any(self.answered.values()):
            self.s.recovering = True
            self.s.count("restarts")
        elif now - self.s.started >= self.s.params.probe_period:
            return self.set_whole(now, out, transfer=False)
        return []

    def set_whole(self, now: float, out: TreeOut, *, transfer: bool) -> Released:
        """The table is whole (a complete peer's ``transfer``, or a first start): pay the
        whole tables owed, hand back the publications held (spec §7.4 ``recovered``)."""
        restarted = self.s.recovering is True
        self.s.recovering = False
        if transfer:
            detail = {"tuples": len(self.s.table), "held": len(self.early), "restart": restarted}
            out.append(TraceRecord("brokertree.recovered", detail))
        for peer in sorted(self.owed):
            if self.s.sessions is not None and self.s.sessions.is_open(peer):
                self.send_summary(peer, now, out)
        self.owed.clear()
        early, self.early = self.early, []
        return early

    def summary_tuples(self, peer: NodeId, whole: bool) -> list[TupleT]:
        """bypassedSubSet [P §4.2.1]: the tuples whose subscriber is not beyond ``peer``, or
        every tuple for a ``whole`` transfer (a client's: its own confirmed subscriptions).
        Not only those numbered after the peer's lSeq: that filter is sound only if every
        tuple reached the peer in the order we numbered them, and a summary forwarded while a
        session was down, or a false suspicion, breaks that order (module essay)."""
        view = self.s.view
        assert view is not None
        rows: list[TupleT] = []
        if not self.s.is_broker:
            # confirmed ones only: an unconfirmed Sub is still queued and is resent in order
            for own in sorted(self.s.own.values(), key=lambda o: o.origin):
                if own.confirmed:
                    rows.append((own.origin, own.topic, own.pred.text, (), own.origin[1]))
            return rows
        for t in self.s.table:
            if whole or peer not in view.path(t.origin[0]):
                rows.append((t.origin, t.topic, t.pred.text, t.vect, t.lseq))
        return rows

    def send_summary(self, peer: NodeId, now: float, out: TreeOut) -> None:
        view = self.s.view
        assert view is not None
        if self.s.is_broker and not view.is_broker(peer):
            edges = tuple(
                (c, view.attach(c))
                for c in sorted(self.s.subscribers)
                if c != peer and view.distance(peer, c) <= view.reach
            )
            self.s.send(peer, TopoSummary(sid=0, n=0, edges=edges, last=True), now, out)
        whole = peer in self.peer_recovering
        if whole and self.s.recovering is not False:
            self.owed.add(peer)  # a whole table once ours is whole
        rows = self.summary_tuples(peer, whole)
        tombstones = tuple(sorted(self.s.tombstones))
        complete = whole and self.s.recovering is False
        self.s.count("summaries")
        parinfo = tuple(
            sorted(
                pi
                for pi in self.s.pt.values()
                if view.distance(pi[0], peer) <= 2 * self.s.delta + 1
            )
        )
        self.send_rows(
            peer, rows, tombstones, now, out, last=True, complete=complete, parinfo=parinfo
        )
        self.fragment_recovered(peer, now, out)

    def fragment_recovered(self, peer: NodeId, now: float, out: TreeOut) -> None:
        """[P §4.2.2]: the lead of a large fragment reached a node of it, which now has the
        partially confirmed subscriptions (the summary just sent): π becomes π̄, and goes to
        the active peers within 2δ + 1 of the lead, so that later publications carry π̄."""
        view = self.s.view
        assert view is not None
        done = [
            pi
            for pi in self.s.pt.values()
            if pi[0] == self.s.node_id and not pi[3] and peer in pi[2]
        ]
        if not done:
            return
        recovered = tuple((pi[0], pi[1], pi[2], True) for pi in done)
        for pi in recovered:
            self.s.pt[(pi[0], pi[1])] = pi
        self.s.count("fragments_recovered", len(recovered))
        for other in sorted(self.s.links):
            if self.s.links[other].state == ACTIVE and view.dist(other) <= 2 * self.s.delta + 1:
                self.send_rows(other, [], (), now, out, last=False, parinfo=recovered)

    def send_rows(
        self,
        peer: NodeId,
        rows: list[TupleT],
        tombstones: tuple[OriginT, ...],
        now: float,
        out: TreeOut,
        *,
        last: bool,
        complete: bool = False,
        parinfo: tuple[ParInfoT, ...] = (),
    ) -> None:
        """``rows`` in SubSummary chunks; the tombstones, partition entries, ``last`` and
        ``complete`` ride on the final one."""
        for start in range(0, max(len(rows), 1), _CHUNK):
            final = start + _CHUNK >= len(rows)
            message = SubSummary(
                sid=0,
                n=0,
                tuples=tuple(rows[start : start + _CHUNK]),
                tombstones=tombstones if final else (),
                parinfo=parinfo if final else (),
                last=last and final,
                complete=complete and final,
            )
            self.s.send(peer, message, now, out)

    def on_summary(self, src: NodeId, message: SubSummary, now: float, out: TreeOut) -> Released:
        """Merge tuples the node lacks and pass them on [P §4.2.1] (spec §7.2)."""
        view = self.s.view
        assert view is not None
        if not self.s.is_broker:
            return []
        self.merge_parinfo(src, message.parinfo, now, out)
        added: list[SubTuple] = []
        bypassed = tuple(reversed(view.between(src)))
        for row in message.tuples:
            entry = self.tuple_from_row(src, row, bypassed)
            if entry is not None and self.s.add_tuple(entry):
                added.append(entry)
        gone: list[OriginT] = []
        for target in message.tombstones:
            if valid_origin(target):
                target = norm_origin(target)
                if target not in self.s.tombstones:
                    self.s.tombstone(target, now)
                    gone.append(target)
        if added or gone:
            self.s.count("summary_tuples", len(added))
            for peer in sorted(self.s.links):
                link = self.s.links[peer]
                if peer == src or link.state != ACTIVE:
                    continue
                # onwards only, away from the subscriber: around a failed node the peers
                # beside it are on the subscriber's side too
                branch = view.branch(peer)
                rows = [
                    (t.origin, t.topic, t.pred.text, t.vect, t.lseq)
                    for t in added
                    if branch != view.branch(t.origin[0])
                ]
                if rows or gone:
                    self.send_rows(peer, rows, tuple(gone), now, out, last=False)
        if message.last and message.complete and self.s.recovering is not False:
            return self.set_whole(now, out, transfer=True)
        return []

    def merge_parinfo(
        self, src: NodeId, parinfo: tuple[ParInfoT, ...], now: float, out: TreeOut
    ) -> None:
        """[P §4.2]: partition entries whose lead is within 2δ + 1 are added if unknown (by
        seq) and passed on; π̄ replaces π (spec §7.2, §7.3)."""
        view = self.s.view
        assert view is not None
        changed: list[ParInfoT] = []
        pt = self.s.pt
        for raw in parinfo:
            try:
                if pt.get((raw[0], raw[1])) == raw:
                    continue  # the common case: an entry we hold as it is
            except (TypeError, IndexError):
                continue
            if not valid_parinfo(raw):
                continue
            pi = norm_parinfo(raw)
            lead = pi[0]
            if lead != self.s.node_id and view.dist(lead) > 2 * self.s.delta + 1:
                continue
            key = (lead, pi[1])
            known = self.s.pt.get(key)
            if known is None or (pi[3] and not known[3]):
                self.s.pt[key] = pi
                changed.append(pi)
        if not changed:
            return
        for other in sorted(self.s.links):
            link = self.s.links[other]
            if other == src or link.state != ACTIVE:
                continue
            onward = tuple(
                pi for pi in changed if view.distance(pi[0], other) <= 2 * self.s.delta + 1
            )
            if onward:
                self.send_rows(other, [], (), now, out, last=False, parinfo=onward)

    def tuple_from_row(
        self, src: NodeId, row: Any, bypassed: tuple[NodeId, ...]
    ) -> SubTuple | None:
        """A summary row as a tuple of ours: the vect shifted as if the tuple had crossed the
        link from ``src`` (spec §7.2), ``from`` recomputed; None if malformed or known."""
        view = self.s.view
        assert view is not None
        if type(row) is not tuple or len(row) != 5:
            return None
        origin, topic, text, vect, lseq = row
        try:
            if origin in self.s.table or origin in self.s.tombstones:
                return None  # the common case: a summary repeats what we have
        except TypeError:  # an unhashable origin: malformed
            return None
        if not valid_origin(origin) or type(topic) is not str or not valid_seq(lseq):
            return None
        origin = norm_origin(origin)
        if origin in self.s.table or origin in self.s.tombstones or topic.startswith("$"):
            return None
        vin = norm_vect(vect)
        if vin is None or type(text) is not str:
            return None
        pred = predicate_text(text, topic)
        if pred is None:
            return None
        vect_here = shifted(vin, src, norm_seq(lseq), bypassed, self.s.delta)
        if origin[0] == self.s.node_id:
            return None
        frm = view.from_of(origin[0])
        return SubTuple(origin, topic, pred, frm, vect_here, self.s.next_seq())
