"""The brokertree node's flow: check-out and confirmation (Kazemzadeh & Jacobsen, *Highly
Available Distributed Publish/Subscribe Systems* §3.5, §5.5, §9; docs/protocols/brokertree.md
§4): the queue every forwarded message enters once, each active session's pointer checking
out the entries relevant to it with a legitimate seqVect (rule CO, head-of-line stalls and
their end past ``stall_timeout``), and rule CF with STEP-I…III, which confirms an entry to its
senders and puts a subscription into the routing table.

A part of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode`, built on the node's
:class:`~pubmesh.proto.brokertree.shared.TreeState` (the queue, the table and the links it
reads); a client's own subscription confirmed is a :class:`~.shared.SubConfirmed` for the
topic history.
"""

from __future__ import annotations

from collections.abc import Iterable

from pubmesh.proto.brokertree.checkout import PUB, SUB, UNSUB, Entry, Kind
from pubmesh.proto.brokertree.messages import (
    Conf,
    OriginT,
    ParInfoT,
    Pub,
    SeqT,
    Sub,
    SubSummary,
    Unsub,
    Vect,
)
from pubmesh.proto.brokertree.seqvect import legitimate, shifted
from pubmesh.proto.brokertree.shared import SubConfirmed, TreeOut, TreeState
from pubmesh.proto.brokertree.state import ACTIVATING, ACTIVE, PENDING, Link
from pubmesh.proto.brokertree.table import SubTuple
from pubmesh.proto.brokertree.wire import (
    norm_origin,
    norm_parinfo,
    predicate,
    valid_origin,
    valid_parinfo,
)
from pubmesh.proto.core import Message, NodeId, TraceRecord

__all__ = ["Flow"]


class Flow:
    """Check-out (CO) and confirmation (CF) of one node's queue (module docstring)."""

    __slots__ = ("confs", "dirty", "s")

    def __init__(self, s: TreeState) -> None:
        self.s = s
        #: Confs to batch per peer this event (spec §12.5)
        self.confs: dict[NodeId, list[OriginT]] = {}
        #: entries whose confirmation may have changed (all of them: ``s.recheck_all``)
        self.dirty: set[Entry] = set()

    def recheck(self, entry: Entry) -> None:
        """``entry``'s confirmation may have changed: rule CF looks at it after this event."""
        self.dirty.add(entry)

    def send_confs(self, now: float, out: TreeOut) -> None:
        """The Confs batched this event, one frame per peer (spec §12.5)."""
        for peer in sorted(self.confs):
            keys = tuple(self.confs[peer])
            self.s.send(peer, Conf(sid=0, n=0, keys=keys, parinfo=()), now, out)
        self.confs.clear()

    def relevant(self, entry: Entry, peer: NodeId) -> bool:
        """CO: the peer is the active connection on the path to a recipient, and its path
        does not lead towards a sender (spec §4)."""
        view = self.s.view
        assert view is not None
        if not any(self.s.candidate(r)[0] == peer for r in entry.rcpt):
            return False
        path = view.path(peer)
        return not any(s == peer or s in path or peer in view.path(s) for s in entry.senders)

    def presumed_gone(self, link: Link, now: float) -> bool:
        """Are the nodes ``link`` bypasses presumed gone for good? Kazemzadeh & Jacobsen, *Highly
        Available Distributed Publish/Subscribe Systems* (Kazemzadeh & Jacobsen) §5.5 holds an
        illegitimate copy "until node or link recoveries trigger retransmission of the message on
        legitimate propagation paths", and spec §4 blocks the session behind it (head of line) until
        it is re-activated. The session is active only while every node it bypasses is down
        (Kazemzadeh & Jacobsen §3.2: the active connection is the closest live node), so once it has
        been stalled ``stall_timeout`` seconds since its activation those nodes have been down that
        long: longer than a falsely suspected node takes to answer the lead's next probe (Kazemzadeh
        & Jacobsen §4.1, every ``probe_period``), so they are taken for crashed, and waiting for
        their recovery would block every later copy on the session, including the ones the δ
        guarantee covers. 0: never (the spec's rule)."""
        timeout = self.s.params.stall_timeout
        return timeout > 0 and link.stalled_since >= 0 and now - link.stalled_since >= timeout

    def inherited(self, entry: Entry, bypassed: tuple[NodeId, ...]) -> bool:
        """With ``past_stall = "forward"`` only: the copy is illegitimate whatever this hop
        bypasses (a node upstream forwarded it past its stall), so no recovery of a node this
        session bypasses would make it legitimate; holding it would only delay it."""
        if self.s.params.past_stall != "forward":
            return False
        if not bypassed:
            return True
        direct = shifted(entry.vin, self.s.node_id, entry.lseq, (), self.s.delta)
        return not legitimate(direct, self.s.delta)

    def pump(self, link: Link, now: float, out: TreeOut) -> None:
        """Move ``link``'s pointer along the queue, checking out relevant entries (CO)."""
        view = self.s.view
        assert view is not None
        queue = self.s.queue
        peer = link.peer
        bypassed = view.between(peer)
        end = queue.end
        while link.pointer < end:
            entry = queue.at(link.pointer)
            if entry is None or entry.confirmed or not self.relevant(entry, peer):
                link.pointer += 1
                if entry is not None:
                    self.dirty.add(entry)
                continue
            vect = shifted(entry.vin, self.s.node_id, entry.lseq, bypassed, self.s.delta)
            if not legitimate(vect, self.s.delta) and not self.inherited(entry, bypassed):
                if link.stalled_since < 0:
                    link.stalled_since = now
                if not self.presumed_gone(link, now):
                    if peer not in entry.stalled:
                        entry.stalled.add(peer)
                        self.s.count("stalls")
                        out.append(
                            TraceRecord(
                                "brokertree.stalled",
                                {"peer": peer, "kind": entry.kind, "origin": repr(entry.origin)},
                            )
                        )
                    return  # head of line (spec §4) until re-activated or stall_timeout
                detail = {"peer": peer, "kind": entry.kind, "origin": repr(entry.origin)}
                if self.s.params.past_stall == "skip":
                    # [P §5.5]: an illegitimate copy is never sent; this session gives it up
                    self.s.count("stall_skips")
                    out.append(TraceRecord("brokertree.stall_skipped", detail))
                    link.pointer += 1
                    self.dirty.add(entry)
                    continue
                # past_stall = "forward" (ours, beyond Kazemzadeh & Jacobsen): sent all the same
                self.s.count("stall_forwards")
                out.append(TraceRecord("brokertree.stall_forwarded", detail))
            message = entry.message
            copy: Message
            if isinstance(message, Pub):
                copy = Pub(
                    sid=0,
                    n=0,
                    origin=entry.origin,
                    pub_id=message.pub_id,
                    topic=message.topic,
                    attributes=message.attributes,
                    payload=message.payload,
                    vect=vect,
                    hops=message.hops + 1,
                    tags=self.tags(entry, message.tags),
                )
                if self.s.params.ack == "conf":
                    entry.out.add(peer)
            elif isinstance(message, Sub):
                copy = Sub(
                    sid=0,
                    n=0,
                    origin=entry.origin,
                    topic=message.topic,
                    filter=message.filter,
                    vect=vect,
                )
                entry.out.add(peer)
            else:
                copy = Unsub(sid=0, n=0, origin=entry.origin, target=message.target, vect=vect)
                entry.out.add(peer)
            self.s.send(peer, copy, now, out)
            link.pointer += 1
            self.dirty.add(entry)

    def confirmable(self, entry: Entry) -> tuple[bool, list[tuple[NodeId, ...]]]:
        """CF (spec §4): out = ∅, every active session passed it, every recipient has an
        active connection on its path; the paths without one (large fragments) are returned
        (a subscription is confirmed partially over them, Kazemzadeh & Jacobsen §3.5 case 2)."""
        if entry.out:
            return False, []
        view = self.s.view
        assert view is not None
        large: list[tuple[NodeId, ...]] = []
        for r in sorted(entry.rcpt):
            hop, status = self.s.candidate(r)
            if hop is None:
                if status == PENDING:
                    return False, []
                large.append(tuple(view.path(r)[: view.reach]))
                continue
            link = self.s.links.get(hop)
            if link is None or link.state != ACTIVE or link.pointer <= entry.index:
                return False, []
        for link in self.s.links.values():
            if link.state == ACTIVATING:
                return False, []
            if link.state == ACTIVE and link.pointer <= entry.index:
                return False, []
        return True, large

    def check_confirmations(self, now: float, out: TreeOut) -> None:
        if self.s.recheck_all:
            candidates = list(self.s.queue.entries())
            self.s.recheck_all = False
        else:
            candidates = sorted(
                (e for e in self.dirty if self.s.queue.get(e.origin) is e), key=lambda e: e.index
            )
        self.dirty.clear()
        dack = self.s.params.ack == "dack"
        for entry in candidates:
            if entry.confirmed or (dack and entry.kind == PUB):
                continue
            ok, large = self.confirmable(entry)
            if not ok:
                continue
            if large and entry.kind == PUB:
                continue  # a publication waits in a large fragment [P §7]
            self.confirm(entry, large, now, out)

    def confirm(
        self, entry: Entry, large: list[tuple[NodeId, ...]], now: float, out: TreeOut
    ) -> None:
        """STEP-I…III [P §3.5]: Conf to the senders, the tuple into the table, the tuple to a
        closer inward node the senders bypassed."""
        view = self.s.view
        assert view is not None
        parinfo = set(entry.parinfo)
        for lfrag in sorted(set(large)):
            pi: ParInfoT = (self.s.node_id, entry.lseq, lfrag, False)
            parinfo.add(pi)
            self.s.pt[(self.s.node_id, entry.lseq)] = pi
        partial = tuple(sorted(parinfo))
        for sender in sorted(entry.senders):
            if partial:
                self.s.send(
                    sender, Conf(sid=0, n=0, keys=(entry.origin,), parinfo=partial), now, out
                )
            else:
                self.conf(sender, entry.origin)
        entry.confirmed = True
        self.s.queue.remove(entry)
        message = entry.message
        if entry.kind == SUB and isinstance(message, Sub):
            self.keep_parinfo(parinfo)
            if entry.origin[0] == self.s.node_id:
                own = self.s.own.get(message.topic)
                if own is not None and own.origin == entry.origin:
                    own.confirmed = True
                    own.parinfo = frozenset(parinfo)
                    out.route(SubConfirmed(message.topic, own.origin))
                out.append(
                    TraceRecord(
                        "brokertree.sub_confirmed",
                        {"topic": message.topic, "partial": bool(parinfo)},
                    )
                )
                return
            if not self.s.is_broker:
                return
            pred = predicate(message.topic, message.filter)
            if pred is None:
                return
            frm = view.from_of(entry.origin[0])
            tuple_ = SubTuple(entry.origin, message.topic, pred, frm, entry.vin, entry.lseq)
            if self.s.add_tuple(tuple_):
                self.step_three(tuple_, entry.senders, now, out)
        elif entry.kind == UNSUB and isinstance(message, Unsub):
            self.s.tombstone(norm_origin(message.target), now)

    def step_three(self, tuple_: SubTuple, senders: set[NodeId], now: float, out: TreeOut) -> None:
        """STEP-III [P §3.5]: if the node has a connection to an inward node other than the
        senders, the tuple goes to the closest such node."""
        view = self.s.view
        assert view is not None
        for hop in view.path(tuple_.origin[0])[: view.reach]:
            if hop in senders:
                return
            link = self.s.links.get(hop)
            if link is not None and link.state == ACTIVE:
                row = (tuple_.origin, tuple_.topic, tuple_.pred.text, tuple_.vect, tuple_.lseq)
                self.s.send(
                    hop,
                    SubSummary(
                        sid=0,
                        n=0,
                        tuples=(row,),
                        tombstones=(),
                        parinfo=(),
                        last=False,
                        complete=False,
                    ),
                    now,
                    out,
                )
                return

    def tags(self, entry: Entry, tags: tuple[ParInfoT, ...]) -> tuple[ParInfoT, ...]:
        """Tagging (Kazemzadeh & Jacobsen §3.5 "Publication Tagging", §7; spec §6.6): a node holding
        π tags π on a publication that comes from the fragment's side (a node of its vector, visited
        or ⊥, lies in π.lFrag), or π̄ once the fragment recovered."""
        if not self.s.pt:
            return tags
        nodes = {node for node, _ in entry.vin}
        merged = {(pi[0], pi[1]): pi for pi in tags}
        for key, pi in self.s.pt.items():
            if nodes.intersection(pi[2]):
                known = merged.get(key)
                if known is None or (pi[3] and not known[3]):
                    merged[key] = pi
        if len(merged) == len(tags) and all(merged[(t[0], t[1])] == t for t in tags):
            return tags
        return tuple(sorted(merged.values()))

    def keep_parinfo(self, parinfo: Iterable[ParInfoT]) -> None:
        """Keep π if its lead is within 2δ + 1 hops [P §3.5]."""
        view = self.s.view
        assert view is not None
        for pi in parinfo:
            lead = pi[0]
            if lead == self.s.node_id or view.dist(lead) <= 2 * self.s.delta + 1:
                self.s.pt[(lead, pi[1])] = pi

    def conf(self, peer: NodeId, key: OriginT) -> None:
        self.confs.setdefault(peer, []).append(key)

    def on_conf(self, src: NodeId, message: Conf) -> None:
        """Rule CF: a Conf from Y removes Y from the entry's out (spec §4)."""
        parinfo = tuple(p for p in message.parinfo if valid_parinfo(p))
        for key in message.keys:
            if not valid_origin(key):
                continue
            entry = self.s.queue.get(norm_origin(key))
            if entry is None:
                continue
            entry.out.discard(src)
            entry.parinfo.update(norm_parinfo(p) for p in parinfo)
            self.dirty.add(entry)

    def enqueue(
        self,
        kind: Kind,
        origin: OriginT,
        message: Pub | Sub | Unsub,
        vin: Vect,
        rcpt: frozenset[NodeId],
        senders: set[NodeId],
        now: float,
        lseq: SeqT | None = None,
    ) -> Entry:
        entry = Entry(
            kind=kind,
            origin=origin,
            message=message,
            lseq=lseq if lseq is not None else self.s.next_seq(),
            vin=vin,
            rcpt=rcpt,
            senders=set(senders),
            t=now,
        )
        self.s.queue.append(entry)
        self.dirty.add(entry)
        return entry
