"""The chord node: content-based publish/subscribe over a Chord-shaped overlay (Terpstra et al.,
Terpstra, Behnel, Fiege, Zeidler, Buchmann, DEBS 2003; docs/protocols/chord.md).

How it works
============
**Topology** (Terpstra et al. §4.1, spec §3). Node u has key key(u) on a ring of 2^64 keys. Its
k-th *publishing edge* p_k(u) is the first node at least D_k = 2^(64−k) clockwise from it
(Chord's finger successor(key(u) + D_k), unless that is u); p(u) = {u} ∪ {p_k(u)}. Sorted by
distance, u, v₁ (the successor), …, v_t partition the ring: u holds v_i responsible for the
*range* r_u(v_i) = [key(v_i), key(v_{i+1})), and itself for [key(u), key(v₁)). v stores the
end of the range each in-neighbour u gives it (RespChange, spec §7): the set of those u is
v's *subscription edges* s(v). A successor list of L nodes (Terpstra et al. §5.1) backs up the
perimeter; the near fingers are read off it, the far ones are looked up.

**Publish** (Terpstra et al. §4.3, spec §5). A publication travels down a per-publisher binomial
tree: u sends it over each edge v, in decreasing range size, with the part of its own range
that v is responsible for, [key(v), key(v) + min(|r_u(v)|, |R| − d(u,v))), and only if the
edge filter f(u→v) matches. Ranges nest and are disjoint between siblings, so nobody receives a
publication twice or outside its range; depth is O(log N).

**Subscribe** (Terpstra et al. §4.4, spec §6). f(u→v) must cover the subscriptions of every node
in r_u(v). v computes it for u: h_u(v) = reduce(f(v→v) ∪ ⋃{f(v→x) : d(v,x) < |r_u(v)|}) and
sends it (FilterUpdate, replace semantics) whenever it changes, so a change ripples
counter-clockwise, each hop recomputing from current state: unsubscribes shrink filters
exactly where nothing else covers the removed conjunction.

**Join and repair** (Terpstra et al. §5, spec §7–§9). A joiner asks a contact, which publishes a
*location notification* for key(v)+1 through its tree; the owner of that key (whose
maintenance subscription covers it) answers straight to v. v then looks up its far fingers the
same way and publishes a *join notice*; every node whose join subscription covers key(v) (the
intervals where v would become one of its fingers or list entries) adopts it. Edge changes
carve filters out of the old ones (a new edge inside the old loopback range forwards everything
until its first FilterUpdate), and are announced with RespChange, retransmitted until the
FilterUpdate that acknowledges it. A failed edge's range is delegated at once to its
counter-clockwise neighbour with the union filter; the successor list refills by Chord's
stabilize, and far fingers are re-resolved (fix_fingers) as a safety net.

Clipped filters
===============
Terpstra et al. §4.4 (and spec §4) put the whole f(v→x) into h_u(v) for every x whose range meets
r_u(v). The last such x's range reaches past r_u(v), and in a correct ring the farthest
fingers' ranges chain round the ring (9→14→0→9 at N = 30), so filter updates would circle
for ever and keep removed conjunctions alive. So v also asks each out-neighbour x for its
filter *clipped* at the range ends v's own in-neighbours need (RespChange.clips), and x
answers one FilterUpdate per end (FilterUpdate.end). h for a range [key(v), e) then uses, for
each x inside it, x's filter up to e or up to the end of r_v(x), whichever comes first
(:meth:`ChordNode.below`): every filter depends only on filters of strictly smaller ranges,
so waves end, and the fixpoint matches exactly the subscriptions inside the range (no boundary
spill). Forwarding uses the tightest filter x has sent for the child's range.

The rule that keeps it correct
==============================
f(u→v) covers every subscription of every node in r_u(v) (Terpstra et al. §4.2). Every rule here
preserves it: carving copies a filter onto a subset of its range, delegation unions, a new
edge forwards everything until its exact filter arrives, and h is recomputed from current
state on every change of its inputs. The quiet predicate Q of :mod:`.legitimacy` checks it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from pubmesh.proto.chord.keys import (
    MASK,
    SIZE,
    dist,
    even_key,
    finger_offset,
    hashed_key,
    key_text,
    text_key,
)
from pubmesh.proto.chord.keys import M as KEY_BITS
from pubmesh.proto.chord.messages import (
    FilterUpdate,
    JoinRequest,
    Leaving,
    LocationReply,
    Notification,
    Publication,
    RespChange,
    SuccListReply,
    SuccListRequest,
)
from pubmesh.proto.chord.params import ChordParams
from pubmesh.proto.chord.routing import (
    MATCH_ALL,
    PrefixChain,
    is_maintenance,
    match_attributes,
    matches_any,
    parse_filter,
    reduce_edge,
    texts,
)
from pubmesh.proto.content import (
    PRESENT,
    Conjunction,
    Disjunction,
    FilterError,
    disjunction_covers,
    matches,
    publication_attributes,
    validate,
    with_topic,
)
from pubmesh.proto.core import (
    Deliver,
    Disconnect,
    Input,
    Leave,
    Message,
    NodeContext,
    NodeId,
    NodeStatistics,
    Output,
    PeerDown,
    Publish,
    Receive,
    Send,
    SetTimer,
    SnapshotRow,
    StackNode,
    Start,
    Subscribe,
    Timer,
    TimerFired,
    TraceRecord,
    Unsubscribe,
)

LOCATION = "$chord.location"
JOIN = "$chord.join"
_FIELD_LOC = "$loc"
_FIELD_JOIN = "$join"
_FIELD_REQ = "$req"
_FIELD_RID = "$rid"


class Phase(enum.StrEnum):
    """Where a node is in its life on the ring (its ``state``; the snapshot shows the value)."""

    IDLE = "idle"
    JOINING = "joining"
    JOINED = "joined"
    LEAVING = "leaving"
    LEFT = "left"


IDLE, JOINING, JOINED, LEAVING, LEFT = Phase  # the phases by their short names, in order
#: messages only a ring member receives: from a node that counts the receiver in its ring
_RING_TRAFFIC = (Publication, Notification, FilterUpdate, RespChange, SuccListRequest)
#: "I am not in the ring": what a rejoining node tells its peers, and answers ring traffic with
_NOT_IN_RING = Leaving(pred=None, successors=())


# ------------------------------------------------------------------------------------ timers
@dataclass(frozen=True, slots=True)
class JoinTick(Timer):
    """Resend the JoinRequest (joining) or the join notice (joined, lookup_tries in all)."""

    life: int
    tick: int


@dataclass(frozen=True, slots=True)
class LookupTimeout(Timer):
    life: int
    rid: int


@dataclass(frozen=True, slots=True)
class RespRetry(Timer):
    life: int
    peer: int
    seq: int


@dataclass(frozen=True, slots=True)
class StabilizeTick(Timer):
    life: int


@dataclass(frozen=True, slots=True)
class FixTick(Timer):
    life: int


@dataclass(frozen=True, slots=True)
class RefreshTick(Timer):
    life: int


@dataclass(frozen=True, slots=True)
class LeaveDone(Timer):
    life: int


@dataclass(slots=True)
class _Lookup:
    """A pending location lookup of finger ``k`` (the join's own lookup is ``join_rid``)."""

    k: int
    target: int
    tries: int
    best: int | None = None


@lru_cache(maxsize=1 << 16)
def _key_of(node: int, even: int) -> int:
    return even_key(node, even) if even else hashed_key(node)


@lru_cache(maxsize=1 << 16)
def _interval(topic: str, attr: str, lo: int | None, hi: int | None, hi_op: str) -> Conjunction:
    """{"$topic": topic, attr: {lower bound, upper bound}} over key texts (keys.py)."""
    ops: dict[str, Any] = {}
    if lo is not None:
        ops["gt" if hi_op == "le" else "ge"] = key_text(lo)
    if hi is not None:
        ops[hi_op] = key_text(hi)
    return validate({"$topic": topic, attr: ops or dict(PRESENT)}, allow_reserved=True)


def _arc_conjunctions(topic: str, attr: str, lo: int, hi: int, hi_op: str) -> list[Conjunction]:
    """The conjunctions of the arc from ``lo`` to ``hi`` (lower bound closed for ``hi_op`` lt,
    open for le), split in two where it wraps past 0 (spec §7: "wrapping intervals split in
    two, empty ones skipped")."""
    if lo == hi:
        return []
    if lo < hi:
        return [_interval(topic, attr, lo, hi, hi_op)]
    parts = [_interval(topic, attr, lo, None, hi_op)]
    if hi > 0 or hi_op == "le":
        parts.append(_interval(topic, attr, None, hi, hi_op))
    return parts


class ChordNode(StackNode):
    """One node of the chord stack (module doc)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: ChordParams = ctx.params if ctx.params is not None else ChordParams()
        self.key = self.key_of(self.node_id)
        self.life = 0
        self.state: Phase = IDLE
        self.contacts: tuple[NodeId, ...] = ()
        self.epoch = 0
        self.subs: dict[str, Conjunction] = {}
        self.queue: list[Publish] = []
        self.delivered = 0
        self.counters: dict[str, int] = {}
        self.received: dict[str, int] = {}
        self._reset_overlay()

    def _reset_overlay(self) -> None:
        """Forget the overlay (a new node, or a rejoin after the list ran out), keep the
        subscriptions (spec §8.3)."""
        #: successor list, clockwise from u (Terpstra et al. §5.1)
        self.succ: list[NodeId] = []
        #: the owner's predecessor from a LocationReply, until a true one connects (spec §3)
        self.pred_hint: NodeId | None = None
        #: p_k(u) for k = 1…m (index k−1), None where undefined
        self.fingers: list[NodeId | None] = [None] * KEY_BITS
        #: p(u)∖u sorted by distance, and the end of r_u(v) for each
        self.edges: list[NodeId] = []
        self.ends: dict[NodeId, int] = {}
        #: edges in send order: decreasing range size, ties smaller distance (§4.3)
        self.order: list[NodeId] = []
        #: f(u→v), and the edges still forwarding everything until their first update
        self.out: dict[NodeId, Disjunction] = {}
        self.pending: set[NodeId] = set()
        #: clipped filters f(u→v) for [key(v), e), and the ends asked of each v
        self.clips: dict[NodeId, dict[int, Disjunction]] = {}
        self.asked: dict[NodeId, tuple[int, ...]] = {}
        #: s(u)∖u: the end of the range each in-neighbour holds u responsible for, and the
        #: clipped ends it asks for
        self.in_ends: dict[NodeId, int] = {}
        self.in_clips: dict[NodeId, tuple[int, ...]] = {}
        self.maintenance: tuple[Conjunction, ...] = ()
        self.loop: Disjunction = ()
        #: the reductions behind h, kept per prefix of the edges (:meth:`union`)
        self.chain = PrefixChain(max_conj=self.params.max_conj, max_in=self.params.max_in)
        #: last h sent to each in-neighbour, and the message (re-sent by the refresh)
        self.sent: dict[tuple[NodeId, int], Disjunction] = {}
        self.sent_msg: dict[tuple[NodeId, int], FilterUpdate] = {}
        self.fu_seq: dict[NodeId, int] = {}
        self.fu_seen: dict[tuple[NodeId, int], tuple[int, int]] = {}
        #: RespChange: our sequence numbers, the unacknowledged ones, and the latest received
        self.rc_seq: dict[NodeId, int] = {}
        self.rc_unacked: dict[NodeId, RespChange] = {}
        self.rc_seen: dict[NodeId, tuple[int, int]] = {}
        self.next_rid = 1
        self.join_rid = 0
        self.join_notices = 0
        self.join_tick = 0
        #: JoinRequests sent since the last Start or rejoin (the first retry waits least)
        self.join_attempts = 0
        self.lookups: dict[int, _Lookup] = {}
        self.fix_cursor = 0
        #: pred(u), the list, the in-neighbours and L after the last input (:meth:`_announce`);
        #: None until the first input after a join (or a warm start) records them
        self.announced: tuple[NodeId | None, tuple[NodeId, ...], frozenset[NodeId], int] | None = (
            None
        )
        #: messages _announce may still send now, and when that was last refilled
        self.push_budget = float(PUSH_BURST)
        self.push_refilled = 0.0

    # -------------------------------------------------------------------------- key helpers
    def key_of(self, node: NodeId) -> int:
        """key(node) (spec §2), hashed or test-only even."""
        return _key_of(node, self.params.even_keys)

    def d(self, node: NodeId) -> int:
        """d(u, node): clockwise distance from this node's key."""
        return dist(self.key, self.key_of(node))

    def succ_len(self) -> int:
        """L: the parameter, or auto = max(4, |p(u)| − 1) (spec §3)."""
        return self.params.succ_len or max(4, len(self.edges))

    def pred(self) -> NodeId | None:
        """pred(u): the in-neighbour closest counter-clockwise, else the hint (spec §3)."""
        if self.in_ends:
            return min(self.in_ends, key=lambda x: (dist(self.key_of(x), self.key), x))
        if self.pred_hint is None and 0 < len(self.succ) < self.succ_len():
            # a list shorter than L holds the whole ring (as in _far_fingers), so its last
            # entry is the predecessor. Without this a node that has a successor but no
            # in-neighbour yet (the contact just after the first joiner adopted it) owned no
            # key: location notifications for a join found no owner, and the joiner waited a
            # join_retry for nothing (ours; Chord's ownership (pred, n], Stoica et al.,
            # SIGCOMM 2001, §4.2, needs a predecessor)
            return self.succ[-1]
        return self.pred_hint

    def alone(self) -> bool:
        return self.state == JOINED and not self.succ

    # ------------------------------------------------------------------------------ handle
    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Receive(src=src, message=message):
                self._receive(src, message, now, out)
            case TimerFired(timer=timer):
                self._fire(timer, now, out)
            case PeerDown(peer=peer):
                if self.state in (JOINING, JOINED) and peer != self.node_id:
                    self._peer_down(peer, out)
            case Start(contacts=contacts):
                self._start(contacts, now, out)
            case Subscribe(topic=topic, filter=filter):
                self._subscribe(topic, filter, out)
            case Unsubscribe(topic=topic):
                if self.subs.pop(topic, None) is not None:
                    self._loop_changed(out)
            case Publish():
                self._publish(event, out)
            case Leave():
                self._leave(out)
        if self.state == JOINED and not _publication(event):
            self._announce(out, now)
        return out

    def _count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    # -------------------------------------------------------------------------------- start
    def _start(self, contacts: tuple[NodeId, ...], now: float, out: list[Output]) -> None:
        """Start (spec §7 step 1): a ring of one without contacts (or as the first contact),
        else a JoinRequest to the contact, retried every join_retry."""
        if self.state != IDLE:
            return
        self.epoch = int(now * 1_000_000)
        self.contacts = tuple(contacts)
        self._arm_periodic(out)
        self._join(out)

    def _join(self, out: list[Output]) -> None:
        if not self.contacts or self.contacts[0] == self.node_id:
            self.state = JOINED
            self._topology_changed(out)
            self._flush_queue(out)
            return
        self.state = JOINING
        self.join_rid = self._rid()
        out.append(Send(self.contacts[0], JoinRequest(rid=self.join_rid)))
        self.join_attempts = 1
        self._arm_join_tick(out, 0)

    def _arm_join_tick(self, out: list[Output], attempt: int) -> None:
        self.join_tick += 1
        delay = _backoff(self.params.join_retry, attempt)
        out.append(SetTimer(delay, JoinTick(self.life, self.join_tick)))

    def _rid(self) -> int:
        rid = self.next_rid
        self.next_rid += 1
        return rid

    def _rejoin(self, out: list[Output]) -> None:
        """Successor list exhausted: rejoin through the contacts, keeping the subscriptions
        (spec §8.3). Out-neighbours are told their edges from us are gone, and every peer
        (out-neighbours too: one may also hold an edge to us) gets Leaving with an empty
        list, as if we left (spec §9): a live in-neighbour (the contact, say) would otherwise
        keep us as its successor and edge, route our own location lookup to us while we are
        joining, and never hear a PeerDown for us (the spec leaves this open;
        tests/proto/chord/test_chord_model.py and test_chord_rules.py replay the cases)."""
        self._count("rejoins")
        out.append(TraceRecord("chord.rejoin", {"node": self.node_id}))
        for v in sorted(self.ends):
            self._send_resp(v, None, out)
        for peer in sorted(self._peers()):  # an out-neighbour may also hold an edge to us
            out.append(Send(peer, _NOT_IN_RING))
        self.life += 1
        # a new incarnation: our RespChange and FilterUpdate sequence numbers restart with the
        # overlay, and a peer keeps the highest (epoch, seq) it saw from us, so without a
        # higher epoch it would ignore everything we send after the rejoin (spec §4, §7)
        self.epoch += 1
        self._reset_overlay()
        self.state = IDLE
        self._arm_periodic(out)
        self._join(out)

    def _arm_periodic(self, out: list[Output]) -> None:
        """Stabilize, fix_fingers and the filter refresh, first due at a random point of
        their period (so nodes started together do not beat in step)."""
        p = self.params
        for timer, period in (
            (StabilizeTick(self.life), p.stabilize_period),
            (FixTick(self.life), p.fix_period),
            (RefreshTick(self.life), p.filter_refresh),
        ):
            out.append(SetTimer(period * self.rng.uniform(0.5, 1.0), timer))

    # ----------------------------------------------------------------------------- receive
    def _receive(self, src: NodeId, message: Message, now: float, out: list[Output]) -> None:
        name = type(message).__name__
        self.received[name] = self.received.get(name, 0) + 1
        if self.state == LEFT or src == self.node_id:
            return
        if self.state == LEAVING:
            if isinstance(message, Publication | Notification):
                self._on_routed(message, out)
            return
        if self.state in (IDLE, JOINING) and isinstance(message, _RING_TRAFFIC):
            # a peer still counts us in the ring from before our rejoin (a message of ours
            # that crossed the Leaving, a list or finger learned second-hand): tell it we are
            # out, as the rejoin did (spec §8.3, §9), or it keeps routing our own location
            # lookup to us and we never join (ours; the spec is silent)
            out.append(Send(src, _NOT_IN_RING))
        match message:
            case Publication() | Notification():
                self._on_routed(message, out)
            case FilterUpdate():
                self._on_filter_update(src, message, out)
            case RespChange():
                self._on_resp_change(src, message, out)
            case JoinRequest(rid=rid):
                self._on_join_request(src, rid, out)
            case LocationReply():
                self._on_location_reply(src, message, out)
            case SuccListRequest():
                if self.alone():
                    # Chord's notify: a node alone (a contact that lost its whole list,
                    # which does not rejoin) takes back a live node that names it successor
                    self._learn(src, out)
                if self.state == JOINED:
                    reply = SuccListReply(pred=self.pred(), successors=tuple(self.succ))
                    out.append(Send(src, reply))
            case SuccListReply(pred=pred, successors=successors):
                self._on_succ_list(src, pred, successors, out)
            case Leaving(pred=pred, successors=successors):
                self._on_leaving(src, pred, successors, out)

    # ------------------------------------------------------------------- publish / routing
    def _publish(self, command: Publish, out: list[Output]) -> None:
        """Publish (spec §5): queued while there is no successor yet, then processed with
        R = K "as if received via the loopback edge" (Terpstra et al. §4.3)."""
        if self.state in (LEAVING, LEFT, IDLE):
            return
        if command.topic.startswith("$"):
            out.append(TraceRecord("chord.bad_topic", {"topic": command.topic}))
            return
        if self.state == JOINING:
            if len(self.queue) < self.params.queue_limit:
                self.queue.append(command)
            else:
                out.append(TraceRecord("chord.queue_full", {"pub_id": command.pub_id}))
            return
        attributes = dict(command.attributes or {})
        publication = Publication(
            topic=command.topic,
            pub_id=command.pub_id,
            payload=command.payload,
            attributes=attributes,
            end=self.key,
            hops=0,
        )
        self._forward_publication(publication, match_attributes(attributes) or {}, None, out)

    def _flush_queue(self, out: list[Output]) -> None:
        queued, self.queue = self.queue, []
        for command in queued:
            self._publish(command, out)

    def _forward_publication(
        self,
        message: Publication,
        attributes: Mapping[str, Any],
        end: int | None,
        out: list[Output],
    ) -> None:
        """Deliver locally if u's own subscription to the topic matches (§4.3: u is the only
        node with key in r_u(u)), then forward down the tree."""
        matched = publication_attributes(attributes, message.topic)
        conj = self.subs.get(message.topic)
        if conj is not None and matches(conj, matched):
            self.delivered += 1
            out.append(
                Deliver(
                    message.topic, message.pub_id, message.payload, message.hops,
                    message.attributes,
                )
            )  # fmt: skip
        self._route(matched, message, end, out)

    def _forward_notification(
        self,
        message: Notification,
        attributes: Mapping[str, Any],
        end: int | None,
        out: list[Output],
    ) -> None:
        """Act on a maintenance notification here (if joined), then forward it exactly as a
        publication (Terpstra et al. §5.1: notifications use the publish mechanism)."""
        matched = dict(attributes)
        matched["$topic"] = message.topic
        if self.state == JOINED:
            self._on_notification(message.topic, matched, out)
        self._route(matched, message, end, out)

    def _route(
        self,
        attributes: Mapping[str, Any],
        message: Publication | Notification,
        end: int | None,
        out: list[Output],
    ) -> None:
        """Forward over the edges of the range R = [key(u), end) (K when ``end`` is None):
        each edge v with d(u,v) < |R| whose filter matches gets a copy of ``message`` with
        [key(v), key(v) + min(|r_u(v)|, |R| − d(u,v))) and one more hop, in decreasing range
        size (Terpstra et al. §4.3)."""
        size = SIZE if end is None else dist(self.key, end)
        for v in self.order:
            offset = self.d(v)
            if offset >= size:
                continue
            length = min(dist(self.key_of(v), self.ends[v]) or SIZE, size - offset)
            child_end = (self.key_of(v) + length) & MASK
            if matches_any(self._edge_filter(v, child_end), attributes):
                out.append(Send(v, replace(message, end=child_end, hops=message.hops + 1)))

    def _on_routed(self, message: Publication | Notification, out: list[Output]) -> None:
        end = message.end
        if not isinstance(end, int) or not 0 <= end < SIZE or end == self.key:
            return
        if not isinstance(message.topic, str) or not isinstance(message.hops, int):
            return
        attributes = match_attributes(message.attributes)
        if attributes is None:
            return
        if isinstance(message, Notification):
            self._forward_notification(message, attributes, end, out)
            return
        well_formed = isinstance(message.payload, bytes) and isinstance(message.pub_id, int)
        if well_formed and not message.topic.startswith("$"):  # user topics (spec §4 "Topics")
            self._forward_publication(message, attributes, end, out)

    def _notify(self, topic: str, attributes: dict[str, Any], out: list[Output]) -> None:
        """Publish a maintenance notification from here with R = K (spec §7)."""
        message = Notification(topic=topic, attributes=attributes, end=self.key, hops=0)
        self._forward_notification(message, attributes, None, out)

    def _on_notification(self, topic: str, attributes: dict[str, Any], out: list[Output]) -> None:
        """The local half of a maintenance notification: the owner of a location answers,
        a node whose join interval holds a newcomer adopts it (Terpstra et al. §5.1–5.2)."""
        requester = attributes.get(_FIELD_REQ)
        if not isinstance(requester, int) or isinstance(requester, bool):
            return
        if topic == LOCATION:
            target = text_key(attributes.get(_FIELD_LOC))
            rid = attributes.get(_FIELD_RID)
            if target is None or not isinstance(rid, int) or not self._owns(target):
                return
            reply = LocationReply(
                rid=rid, target=target, pred=self.pred(), successors=tuple(self.succ)
            )
            if requester == self.node_id:
                self._on_location_reply(self.node_id, reply, out)
            else:
                out.append(Send(requester, reply))
        elif topic == JOIN:
            joined = text_key(attributes.get(_FIELD_JOIN))
            if joined is None or requester == self.node_id or joined != self.key_of(requester):
                return
            if any(matches(c, attributes) for c in self.maintenance):
                self._learn(requester, out)

    def _owns(self, target: int) -> bool:
        """Is ``target`` in u's Chord ownership range (key(pred), key(u)]?"""
        if self.alone():
            return True
        pred = self.pred()
        if pred is None:
            return False
        lo = self.key_of(pred)
        return 0 < dist(lo, target) <= dist(lo, self.key)

    # ------------------------------------------------------------------ joins and lookups
    def _on_join_request(self, src: NodeId, rid: int, out: list[Output]) -> None:
        """The contact publishes a location notification for key(v)+1 (spec §7 step 2)."""
        if self.state != JOINED or not isinstance(rid, int):
            return
        self._count("join_requests")
        self._notify(
            LOCATION,
            {
                _FIELD_LOC: key_text((self.key_of(src) + 1) & MASK),
                _FIELD_REQ: src,
                _FIELD_RID: rid,
            },
            out,
        )

    def _lookup(self, k: int, out: list[Output]) -> None:
        """Resolve finger k by a location notification through u's own tree (spec §7.5)."""
        target = (self.key + finger_offset(k)) & MASK
        if any(look.k == k for look in self.lookups.values()):
            return
        rid = self._rid()
        self.lookups[rid] = _Lookup(k, target, 1)
        self._send_lookup(rid, target, out)

    def _send_lookup(self, rid: int, target: int, out: list[Output]) -> None:
        delay = _backoff(self.params.location_timeout, self.lookups[rid].tries - 1)
        out.append(SetTimer(delay, LookupTimeout(self.life, rid)))
        self._notify(
            LOCATION,
            {_FIELD_LOC: key_text(target), _FIELD_REQ: self.node_id, _FIELD_RID: rid},
            out,
        )

    def _on_location_reply(self, src: NodeId, reply: LocationReply, out: list[Output]) -> None:
        rid = reply.rid
        if self.state == JOINING and rid == self.join_rid and src != self.node_id:
            self._joined(src, reply, out)
            return
        look = self.lookups.get(rid)
        if look is None or self.state != JOINED:
            return
        look.tries = -1  # answered: the timeout closes it
        # spec §7.5: accept x only if x ≠ u and d(u,x) ≥ d(u,t); keep the least d (§8.1)
        if src == self.node_id or self.d(src) < dist(self.key, look.target):
            return
        if look.best is not None and self.d(look.best) <= self.d(src):
            return
        look.best = src
        if self.fingers[look.k - 1] != src:
            self.fingers[look.k - 1] = src
            self._topology_changed(out)

    def _joined(self, owner: NodeId, reply: LocationReply, out: list[Output]) -> None:
        """LocationReply to the join (spec §7 step 4–6): successor = the owner, list = [owner]
        + the owner's list, predecessor hint = the owner's predecessor; then the far fingers
        are looked up and the join notice goes out."""
        self.state = JOINED
        self._count("joins")
        candidates = [owner, *(x for x in reply.successors if isinstance(x, int))]
        self.succ = self._clockwise(candidates)
        pred = reply.pred
        self.pred_hint = pred if isinstance(pred, int) and pred != self.node_id else owner
        self._topology_changed(out)
        for k in self._far_fingers():
            self._lookup(k, out)
        self.join_notices = 0
        self._join_notice(out)
        self._arm_join_tick(out, 0)
        self._flush_queue(out)

    def _join_notice(self, out: list[Output]) -> None:
        self.join_notices += 1
        self._notify(JOIN, {_FIELD_JOIN: key_text(self.key), _FIELD_REQ: self.node_id}, out)

    def _learn(self, v: NodeId, out: list[Output]) -> None:
        """A node v joined: adopt it wherever it is closer than the current p_k or list entry
        (Terpstra et al. §5.2: "every u whose join interval matches recomputes p(u) and its
        list")."""
        if v == self.node_id:
            return
        d_v = self.d(v)
        changed = False
        for k in range(1, KEY_BITS + 1):
            current = self.fingers[k - 1]
            if d_v >= finger_offset(k) and (current is None or d_v < self.d(current)):
                self.fingers[k - 1] = v
                changed = True
        if v not in self.succ:
            merged = self._clockwise([*self.succ, v])
            if merged != self.succ:
                self.succ = merged
                changed = True
        if changed:
            self._topology_changed(out)

    def _clockwise(self, nodes: Iterable[NodeId]) -> list[NodeId]:
        """Distinct nodes other than u, by distance, cut to L."""
        seen = sorted({x for x in nodes if x != self.node_id}, key=lambda x: (self.d(x), x))
        return seen[: self.succ_len()]

    def _drop_far_finger(self, k: int) -> bool:
        """Mark far finger k undefined; True if that changed it."""
        if self.fingers[k - 1] is None or k not in self._far_fingers():
            return False
        self.fingers[k - 1] = None
        return True

    def _far_fingers(self) -> list[int]:
        """The k whose p_k lies beyond the successor list (only if the list is full: a short
        list holds the whole ring)."""
        if len(self.succ) < self.succ_len():
            return []
        span = self.d(self.succ[-1])
        return [k for k in range(1, KEY_BITS + 1) if finger_offset(k) > span]

    # ------------------------------------------------------------------ stabilize, leave
    def _on_succ_list(
        self, src: NodeId, pred: object, successors: object, out: list[Output]
    ) -> None:
        """Chord's stabilize (spec §7 "Periodic repair"): a predecessor of our successor that
        lies between us becomes the successor; the list becomes [successor] + its list.

        With the auto length (L = |p(u)| − 1, spec §3) L differs between nodes, and a
        successor's list may be shorter than our L − 1; the list would then stay short for
        ever (found at N = 200 built by joins, bench/bench_chord_joins.py). So a list still
        short of L after a reply that did not wrap around the ring to us is extended by
        asking its last entry for its list, whose answer adds the nodes beyond it (ours)."""
        if self.state != JOINED or not self.succ or not isinstance(successors, tuple | list):
            return
        if src != self.succ[0]:
            if src == self.succ[-1] and len(self.succ) < self.succ_len():
                beyond = [x for x in successors if isinstance(x, int) and self.d(x) > self.d(src)]
                new = self._clockwise([*self.succ, *beyond])
                self._set_succ(new, successors, out, extension=True)
            return
        nodes = [src, *(x for x in successors if isinstance(x, int) and x != self.node_id)]
        # entries beyond the reply's last one stay: a successor with a shorter L cannot
        # vouch for them, and a dead one is dropped on its PeerDown
        reach = max(self.d(x) for x in nodes)
        nodes += [x for x in self.succ if self.d(x) > reach]
        if isinstance(pred, int) and pred != self.node_id and self.d(pred) < self.d(src):
            nodes.append(pred)
            self._learn(pred, out)
        self._set_succ(self._clockwise(nodes), successors, out, extension=False)

    def _set_succ(
        self,
        new: list[NodeId],
        reply: tuple[object, ...] | list[object],
        out: list[Output],
        *,
        extension: bool,
    ) -> None:
        """Adopt a successor list from a stabilize reply, then extend it if still short."""
        grew = len(new) > len(self.succ)
        if new != self.succ:
            self.succ = new
            self._topology_changed(out)
        wrapped = self.node_id in reply  # the reply reached round the ring to us
        short = 0 < len(self.succ) < self.succ_len()
        # an extension reply asks further only if it added someone: no ping-pong with a last
        # entry that knows nobody beyond itself
        if short and not wrapped and (grew or not extension):
            out.append(Send(self.succ[-1], SuccListRequest()))

    def _announce(self, out: list[Output], now: float) -> None:
        """Reactive stabilization (ours), after every input of a joined node.

        Chord's stabilize is a pull (Stoica et al., "Chord: A Scalable Peer-to-peer Lookup
        Service for Internet Applications", SIGCOMM 2001, §5.1: n asks its successor for its
        predecessor, then notify): a node hears that the ring changed beside it only at its
        next stabilize_period. After nodes join together (a cluster booting, Terpstra et al. §5.2's
        join notices racing the filter waves that would carry them) a correction then travels
        one node counter-clockwise per period, and the list of L entries (Terpstra et al. §5.1)
        and the fingers read off it settled only after several periods: 9–24 s for 12 nodes
        joining at once, in the simulator and over TCP alike. So the answers a stabilize would
        fetch are pushed the moment they change, to exactly the nodes that would ask:

        * pred(u) or u's list changed: u sends the stabilize answer (SuccListReply) to pred(u)
          and, if pred(u) moved, to the former predecessor, whose successor u is;
        * a new in-neighbour (its RespChange is our notify, spec §7) gets the answer at once;
        * pred(u) moved clockwise to p (p lies between the former predecessor and u): every
          in-neighbour of u gets p's join notice directly, as does any new in-neighbour. A
          node whose finger is u holds u as the first node past key + D_k, so p may take u's
          place exactly there (Terpstra et al. §5.2: every node whose join interval holds p adopts
          it); the notice's range [key(v), key(v)+1) holds no edge, so it goes no further;
        * L grew with p(u) (the auto length, spec §3) and left the list short: its last entry
          is asked for the rest at once, as :meth:`_set_succ` does after a stabilize answer.

        Each push is caused by a change of state, so the pushes end when the changes do, but
        a live node outside the ring that some lists still hold (one still joining, or
        rejoining, spec §8.3) is dropped where it answers "not in the ring" and brought back
        from the lists that keep it (_on_succ_list keeps entries beyond a reply's reach), at
        message speed, for as long as its join takes (found by
        tests/proto/chord/test_chord_model.py, where no timer fires while messages are
        drained); so the pushes draw on a budget of PUSH_BURST messages that refills at that many
        per stabilize_period, and beyond it the periodic stabilize and fix_fingers, the safety net
        they always were (lost messages, failures), carry the changes."""
        p = self.params
        self.push_budget = min(
            float(PUSH_BURST),
            self.push_budget + PUSH_BURST * (now - self.push_refilled) / p.stabilize_period,
        )
        self.push_refilled = now
        start = len(out)
        self._push_changes(out)
        allowed = start + int(self.push_budget)
        if len(out) > allowed:
            del out[allowed:]  # over budget: the periodic repair carries the rest
        self.push_budget -= len(out) - start

    def _push_changes(self, out: list[Output]) -> None:
        """The messages of :meth:`_announce` for the change since the last input."""
        pred = self.pred()
        succ = tuple(self.succ)
        ins = frozenset(self.in_ends)
        length = self.succ_len()
        last, self.announced = self.announced, (pred, succ, ins, length)
        if last is None:
            return
        old, old_succ, old_ins, old_length = last
        if length > old_length and 0 < len(succ) < length:
            # L grew with p(u) (auto length, spec §3): extend the list now, as _set_succ
            # does after a stabilize answer, rather than at the next period
            out.append(Send(succ[-1], SuccListRequest()))
        new_ins = ins - old_ins
        told = set(new_ins)
        if (pred, succ) != (old, old_succ):
            told.update(x for x in (pred, old) if x is not None and x in ins)
        if told:
            reply = SuccListReply(pred=pred, successors=succ)
            for peer in sorted(told):
                out.append(Send(peer, reply))
        if pred is None:
            return
        moved_in = old is not None and pred != old and self.d(pred) > self.d(old)
        notify = (ins if moved_in else new_ins) - {pred}
        if notify:
            attributes = {_FIELD_JOIN: key_text(self.key_of(pred)), _FIELD_REQ: pred}
            for v in sorted(notify):
                end = (self.key_of(v) + 1) & MASK
                notice = Notification(topic=JOIN, attributes=attributes, end=end, hops=0)
                out.append(Send(v, notice))

    def _on_leaving(self, src: NodeId, pred: object, successors: object, out: list[Output]) -> None:
        """Leaving (spec §9): as PeerDown without the detection delay; the predecessor splices
        in the leaver's list, the successor takes its predecessor as a hint."""
        if self.state != JOINED:
            return
        if self.succ and src == self.succ[0] and isinstance(successors, tuple | list):
            rest = [x for x in self.succ if x != src]
            spliced = [x for x in successors if isinstance(x, int) and x != src]
            self.succ = self._clockwise([*rest, *spliced])  # empty: _peer_down rejoins
        if isinstance(pred, int) and pred != self.node_id and self.pred() == src:
            self.pred_hint = pred
        self._peer_down(src, out)

    def _leave(self, out: list[Output]) -> None:
        """Graceful leave (spec §9, ours): tell p ∪ s ∪ list, forward for leave_linger."""
        if self.state not in (JOINED, JOINING):
            return
        message = Leaving(pred=self.pred(), successors=tuple(self.succ))
        for peer in sorted(self._peers()):
            out.append(Send(peer, message))
        self.subs.clear()
        self.state = LEAVING
        out.append(SetTimer(self.params.leave_linger, LeaveDone(self.life)))

    def _peers(self) -> set[NodeId]:
        peers = set(self.edges) | set(self.in_ends) | set(self.succ)
        peers.discard(self.node_id)
        return peers

    # ------------------------------------------------------------------------ failures
    def _peer_down(self, x: NodeId, out: list[Output]) -> None:
        """PeerDown (spec §8): drop x everywhere; x's range goes to its counter-clockwise
        neighbour with the union filter (in :meth:`_install_edges`), far fingers that were x
        are looked up again, the list refills from the new successor."""
        self.rc_unacked.pop(x, None)  # x cannot acknowledge anything any more
        was_successor = bool(self.succ) and self.succ[0] == x
        known = x in self.succ or x in self.ends or x in self.in_ends or x == self.pred_hint
        if not known and x not in self.fingers:
            return  # a stranger (or, while joining, the contact: the JoinTick retries)
        self.succ = [y for y in self.succ if y != x]
        self._forget_in(x)
        if self.pred_hint == x:
            self.pred_hint = None
        lost = [k for k in range(1, KEY_BITS + 1) if self.fingers[k - 1] == x]
        for k in lost:
            self.fingers[k - 1] = None
        for look in self.lookups.values():
            if look.best == x:
                look.best = None
        if self.state != JOINED:
            return
        # the successor is always an edge, so a node that had one still has self.ends here
        if not self.succ and self.ends and self.contacts and self.contacts[0] != self.node_id:
            self._rejoin(out)
            return
        self._topology_changed(out)
        self.rc_unacked.pop(x, None)  # the edge change told x its edge is gone: it cannot ack
        self._update_clips(out)  # x's wanted ends are gone with it
        far = set(self._far_fingers())
        for k in lost:
            if k in far and self.fingers[k - 1] is None:
                self._lookup(k, out)
        if was_successor and self.succ:
            out.append(Send(self.succ[0], SuccListRequest()))

    # --------------------------------------------------------------------------- timers
    def _fire(self, timer: Timer, now: float, out: list[Output]) -> None:
        life = getattr(timer, "life", None)
        if life != self.life or self.state == LEFT:
            return
        p = self.params
        match timer:
            case LeaveDone():
                self.state = LEFT
                for peer in sorted(self._peers()):
                    out.append(Disconnect(peer))
            case _ if self.state == LEAVING:
                return
            case JoinTick(tick=tick) if tick == self.join_tick:
                if self.state == JOINING:
                    self.join_rid = self._rid()
                    out.append(Send(self.contacts[0], JoinRequest(rid=self.join_rid)))
                    self._arm_join_tick(out, self.join_attempts)
                    self.join_attempts += 1
                elif self.state == JOINED and self.join_notices < p.lookup_tries:
                    # every joiner sends lookup_tries notices, backing off (_backoff), not
                    # only until its predecessor answers: a notice is a publication without
                    # an answer (Terpstra et al. §5.2), and one that met a filter not yet covering
                    # a node's join interval (nodes joining together) is lost for that node
                    # alone, which then lacked the joiner as a far finger until fix_fingers
                    # came round to it (ours; the spec resent only to reach the predecessor)
                    self._join_notice(out)
                    self._arm_join_tick(out, self.join_notices - 1)
            case LookupTimeout(rid=rid):
                look = self.lookups.get(rid)
                if look is None:
                    return
                if look.tries < 0 or look.tries >= p.lookup_tries or self.state != JOINED:
                    del self.lookups[rid]
                    # only wrapped answers: no node lies D_k away, p_k is undefined
                    wrapped = look.tries < 0 and look.best is None
                    if wrapped and self._drop_far_finger(look.k):
                        self._topology_changed(out)
                    return
                look.tries += 1
                self._send_lookup(rid, look.target, out)
            case RespRetry(peer=peer, seq=seq):
                pending = self.rc_unacked.get(peer)
                if pending is not None and pending.seq == seq:
                    out.append(Send(peer, pending))
                    out.append(SetTimer(p.resp_retry, timer))
            case StabilizeTick():
                if self.state == JOINED and self.succ:
                    out.append(Send(self.succ[0], SuccListRequest()))
                out.append(SetTimer(p.stabilize_period, timer))
            case FixTick():
                far = self._far_fingers() if self.state == JOINED else []
                if far:
                    self.fix_cursor = (self.fix_cursor + 1) % len(far)
                    self._lookup(far[self.fix_cursor], out)
                out.append(SetTimer(p.fix_period, timer))
            case RefreshTick():
                for peer, e in sorted(self.sent_msg):
                    out.append(Send(peer, self.sent_msg[(peer, e)]))
                out.append(SetTimer(p.filter_refresh, timer))

    # ------------------------------------------------------------------------ topology
    def _topology_changed(self, out: list[Output]) -> None:
        """The list or a finger changed: cut the list to L, read the near fingers off it,
        install the edges and the maintenance subscriptions."""
        # the list is cut to L only where it is rebuilt (_clockwise): an auto L that shrinks
        # while failed fingers are being replaced must not throw away live backups
        self._fingers_from_list()
        edges = sorted(
            {f for f in self.fingers if f is not None and f != self.node_id},
            key=lambda x: (self.d(x), x),
        )
        if edges != self.edges:
            self._install_edges(edges, out)
        self._maintenance_changed(out)

    def _fingers_from_list(self) -> None:
        """p_k for D_k within the list's span is the first list entry at least D_k away (spec
        §3, §7.5); the far ones are left as they are."""
        span = self.d(self.succ[-1]) if self.succ else 0
        distances = [self.d(x) for x in self.succ]
        for k in range(1, KEY_BITS + 1):
            offset = finger_offset(k)
            if offset > span:
                continue  # far fingers: looked up, learnt from join notices, dropped on failure
            self.fingers[k - 1] = next(
                x for x, dx in zip(self.succ, distances, strict=True) if dx >= offset
            )

    def _install_edges(self, edges: list[NodeId], out: list[Output]) -> None:
        """Edge change (spec §7, Terpstra et al. §5.2): new ranges, filters carved from the old
        ones, RespChange to every peer whose range changed.

        f_new(u→v) is f_old(u→v) if v's range only shrank; else the union of the old filters
        whose ranges meet the new one (delegation of a lost peer's range, §8.2), or match-all
        and *pending* if the new range meets u's old loopback range (a carve with w = u)."""
        old_edges, old_ends, old_out = self.edges, self.ends, self.out
        old_first = self.key_of(old_edges[0]) if old_edges else self.key
        old_loop = dist(self.key, old_first) or SIZE
        ends = self._range_ends(edges)
        new_out: dict[NodeId, Disjunction] = {}
        pending: set[NodeId] = set()
        for v in edges:
            start = self.key_of(v)
            size = dist(start, ends[v]) or SIZE
            if v in old_out and size <= (dist(start, old_ends[v]) or SIZE):
                new_out[v] = old_out[v]
                if v in self.pending:
                    pending.add(v)
                continue
            if _arcs_meet(self.key, old_loop, start, size):
                new_out[v] = MATCH_ALL
                pending.add(v)
                continue
            parts: list[Conjunction] = []
            for y in old_edges:
                y_start = self.key_of(y)
                if _arcs_meet(y_start, dist(y_start, old_ends[y]) or SIZE, start, size):
                    parts.extend(old_out[y])
                    if y in self.pending:
                        pending.add(v)
            new_out[v] = self._reduce(parts, bound=True)
        self.edges, self.ends, self.out, self.pending = edges, ends, new_out, pending
        for v in [v for v in self.clips if old_ends.get(v) != ends.get(v)]:
            del self.clips[v]
        for v in [v for v in self.asked if v not in ends]:
            del self.asked[v]
        self.order = self._send_order()
        for v in edges:
            if old_ends.get(v) != ends[v] or self._clips_for(v) != self.asked.get(v, ()):
                self._send_resp(v, ends[v], out)
        for y in old_edges:
            if y not in ends:
                self._send_resp(y, None, out)
        self._push_all(out)

    def _send_resp(self, v: NodeId, end: int | None, out: list[Output]) -> None:
        seq = self.rc_seq.get(v, 0) + 1
        self.rc_seq[v] = seq
        clips = self._clips_for(v) if end is not None else ()
        if clips:
            self.asked[v] = clips
        else:
            self.asked.pop(v, None)
        kept = {e: f for e, f in self.clips.get(v, {}).items() if e in clips}
        if kept:
            self.clips[v] = kept
        else:
            self.clips.pop(v, None)
        message = RespChange(epoch=self.epoch, seq=seq, end=end, clips=clips)
        self.rc_unacked[v] = message
        out.append(Send(v, message))
        out.append(SetTimer(self.params.resp_retry, RespRetry(self.life, v, seq)))

    def _maintenance_changed(self, out: list[Output]) -> None:
        """Recompute the maintenance subscriptions (spec §7): the location range
        (key(pred), key(u)] (everything while alone), and the join intervals where a newcomer
        would become one of u's fingers or list entries."""
        conjs: list[Conjunction] = []
        if self.state == JOINED:
            if self.alone():
                conjs.append(_interval(LOCATION, _FIELD_LOC, None, None, "le"))
            else:
                pred = self.pred()
                if pred is not None:
                    conjs += _arc_conjunctions(
                        LOCATION, _FIELD_LOC, self.key_of(pred), self.key, "le"
                    )
            last_k: dict[NodeId, int] = {}
            undefined = 0
            for k in range(1, KEY_BITS + 1):
                f = self.fingers[k - 1]
                if f is None:
                    undefined = k
                else:
                    last_k[f] = k
            for f in sorted(last_k, key=lambda x: (self.d(x), x)):
                lo = (self.key + finger_offset(last_k[f])) & MASK
                conjs += _arc_conjunctions(JOIN, _FIELD_JOIN, lo, self.key_of(f), "lt")
            if undefined:
                lo = (self.key + finger_offset(undefined)) & MASK
                conjs += _arc_conjunctions(JOIN, _FIELD_JOIN, lo, self.key, "lt")
            if self.succ:
                lo = (self.key + 1) & MASK
                conjs += _arc_conjunctions(JOIN, _FIELD_JOIN, lo, self.key_of(self.succ[-1]), "lt")
        maintenance = tuple(sorted(set(conjs)))
        if maintenance != self.maintenance:
            self.maintenance = maintenance
            self._loop_changed(out)

    # ------------------------------------------------------------------------- filters
    def _reduce(self, conjunctions: Iterable[Conjunction], *, bound: bool) -> Disjunction:
        p = self.params
        return reduce_edge(
            conjunctions, p.routing, max_conj=p.max_conj, max_in=p.max_in, bound=bound
        )

    def _subscribe(self, topic: str, filter: Mapping[str, Any] | None, out: list[Output]) -> None:
        """Subscribe (spec §6): validate, ignore a repeated topic, add the conjunction to the
        loopback (Terpstra et al. §4.4)."""
        if not isinstance(topic, str) or topic.startswith("$"):
            out.append(TraceRecord("chord.bad_filter", {"topic": str(topic), "error": "topic"}))
            return
        if topic in self.subs or self.state in (LEAVING, LEFT):
            return
        try:
            conj = with_topic(validate(filter or {}), topic)
        except (FilterError, TypeError, ValueError) as error:
            out.append(TraceRecord("chord.bad_filter", {"topic": topic, "error": str(error)}))
            return
        self.subs[topic] = conj
        self._loop_changed(out)

    def _loop_changed(self, out: list[Output]) -> None:
        loop = self._reduce([*self.subs.values(), *self.maintenance], bound=False)
        if loop != self.loop:
            self.loop = loop
            self._push_all(out)

    def _wanted(self) -> set[int]:
        """Every range end some in-neighbour asks this node's filter for."""
        ends = set(self.in_ends.values())
        for clips in self.in_clips.values():
            ends.update(clips)
        return ends

    def _clips_for(self, v: NodeId) -> tuple[int, ...]:
        """The ends of wanted ranges that fall strictly inside r_u(v): there u needs v's
        filter for [key(v), e) only ("Clipped filters" in the module doc)."""
        start = self.key_of(v)
        size = dist(start, self.ends[v]) or SIZE
        offset = self.d(v)
        return tuple(
            sorted(
                e
                for e in self._wanted()
                if 0 < dist(start, e) < size and offset < (dist(self.key, e) or SIZE)
            )
        )

    def _update_clips(self, out: list[Output]) -> None:
        """Ask each out-neighbour for the clipped filters the wanted ends now need."""
        for v in self.edges:
            clips = self._clips_for(v)
            if clips != self.asked.get(v, ()):
                self._send_resp(v, self.ends[v], out)

    def _range_ends(self, edges: list[NodeId]) -> dict[NodeId, int]:
        """r_u(v_i) = [key(v_i), key(v_{i+1})), the last one ending at key(u) (§3)."""
        return {
            v: self.key_of(edges[i + 1]) if i + 1 < len(edges) else self.key
            for i, v in enumerate(edges)
        }

    def _send_order(self) -> list[NodeId]:
        """The edges in decreasing range size, ties by distance (Terpstra et al. §4.3)."""
        return sorted(
            self.edges,
            key=lambda v: (-(dist(self.key_of(v), self.ends[v]) or SIZE), self.d(v), v),
        )

    def below(self, e: int) -> list[tuple[NodeId, int]]:
        """The edges x inside a range [key(u), e), each with the end up to which its filter
        is needed: e where e falls inside r_u(x) (a clipped filter), else r_u(x)'s own end
        (module doc, "Clipped filters")."""
        size = dist(self.key, e) or SIZE
        found = []
        for x in self.edges:
            if self.d(x) >= size:
                break
            start = self.key_of(x)
            inside = dist(start, e) < (dist(start, self.ends[x]) or SIZE)
            found.append((x, e if inside else self.ends[x]))
        return found

    def _edge_filter(self, x: NodeId, e: int) -> Disjunction:
        """f(u→x) restricted to [key(x), e): the clipped filter for e, when e ends inside
        r_u(x) and x has sent it, else the whole f(u→x) (a superset)."""
        if e != self.ends[x]:
            clipped = self.clips.get(x, {}).get(e)
            if clipped is not None:
                return clipped
        return self.out[x]

    def _h(self, e: int, cache: dict[int, Disjunction]) -> Disjunction:
        """h for an in-neighbour's range [key(v), e) (Terpstra et al. §4.4): the loopback and, for
        every settled edge x with d(v,x) < d(v,e), the filter of x for the part of r_v(x)
        inside the range (module doc, "Clipped filters")."""
        h = cache.get(e)
        if h is None:
            pending = self.pending
            h = cache[e] = self.union(
                e, lambda x, needed: () if x in pending else self._edge_filter(x, needed)
            )
        return h

    def union(self, e: int, filter_of: Callable[[NodeId, int], Disjunction]) -> Disjunction:
        """reduce(loopback ∪ filter_of(x, needed) for (x, needed) in below(e)): h for the
        range [key(u), e) given each edge's filter for the part of its range inside it (the
        protocol's current filters, or the warm start's fixpoint ones). With ``merging`` the
        reductions share their prefixes (:class:`~pubmesh.proto.chord.routing.PrefixChain`)."""
        below = self.below(e)
        if self.params.routing != "merging":
            parts = list(self.loop)
            for x, needed in below:
                parts.extend(filter_of(x, needed))
            return self._reduce(parts, bound=True)
        head = [self.loop]
        last: Disjunction = ()
        for x, needed in below:
            if needed == self.ends[x]:
                head.append(filter_of(x, needed))
            else:
                last = filter_of(x, needed)  # clipped: only the last edge can be
        return self.chain.reduce(head, last)

    def _push_all(self, out: list[Output], beyond: int = -1) -> None:
        """Send every wanted filter that changed; with ``beyond``, only those whose range
        reaches past that distance (the others cannot have changed)."""
        cache: dict[int, Disjunction] = {}
        for u in sorted(self.in_ends):
            for e in (self.in_ends[u], *self.in_clips.get(u, ())):
                if (dist(self.key, e) or SIZE) > beyond:
                    self._push(u, e, cache, out)

    def _push(
        self,
        u: NodeId,
        e: int | None,
        cache: dict[int, Disjunction],
        out: list[Output],
        ack: bool = False,
    ) -> None:
        h: Disjunction = () if e is None else self._h(e, cache)
        if not ack and self.sent.get((u, e if e is not None else -1)) == h:
            return
        seq = self.fu_seq.get(u, 0) + 1
        self.fu_seq[u] = seq
        seen = self.rc_seen.get(u)
        message = FilterUpdate(
            epoch=self.epoch,
            seq=seq,
            range_seq=seen[1] if seen else 0,
            end=e if e is not None else -1,
            filter=texts(h),
        )
        if e is not None:
            self.sent[(u, e)] = h
            self.sent_msg[(u, e)] = message
        out.append(Send(u, message))

    def _forget_in(self, u: NodeId) -> None:
        self.in_ends.pop(u, None)
        self.in_clips.pop(u, None)
        for pair in [pair for pair in self.sent if pair[0] == u]:
            del self.sent[pair]
            self.sent_msg.pop(pair, None)

    def _on_resp_change(self, src: NodeId, message: RespChange, out: list[Output]) -> None:
        """RespChange (spec §7): store the range end (u joins s(v), or leaves on None) and the
        clipped ends, and always answer with FilterUpdates, the acknowledgement."""
        if self.state != JOINED:
            return
        epoch, seq, end, clips = message.epoch, message.seq, message.end, message.clips
        if not isinstance(epoch, int) or not isinstance(seq, int):
            return
        if end is not None and not self._valid_end(end):
            return
        if not isinstance(clips, tuple | list) or not all(self._valid_end(e) for e in clips):
            return
        seen = self.rc_seen.get(src)
        if seen is not None and (epoch, seq) < seen:
            return
        self.rc_seen[src] = (epoch, seq)
        pred_before = self.pred()
        self._forget_in(src)
        cache: dict[int, Disjunction] = {}
        if end is None:
            self._push(src, None, cache, out, ack=True)
        else:
            self.in_ends[src] = end
            self.in_clips[src] = tuple(sorted({e for e in clips if e != end}))
            for e in (end, *self.in_clips[src]):
                self._push(src, e, cache, out, ack=True)
        self._update_clips(out)
        if self.pred() != pred_before:
            self._maintenance_changed(out)

    def _valid_end(self, e: object) -> bool:
        return isinstance(e, int) and not isinstance(e, bool) and 0 <= e < SIZE and e != self.key

    def _on_filter_update(self, src: NodeId, message: FilterUpdate, out: list[Output]) -> None:
        """FilterUpdate (spec §6): acknowledge our RespChange, refuse stale or foreign
        updates, replace f(v→w) (or one of its clipped filters), and pass the change on to
        every in-neighbour whose range reaches w."""
        if self.state != JOINED:
            return
        epoch, seq, e = message.epoch, message.seq, message.end
        if not isinstance(epoch, int) or not isinstance(seq, int) or not isinstance(e, int):
            return
        pending = self.rc_unacked.get(src)
        acked = isinstance(message.range_seq, int) and pending is not None
        if acked and pending is not None and message.range_seq >= pending.seq:
            del self.rc_unacked[src]
        if src not in self.out:
            return
        full = e == self.ends[src]
        if not full and e not in self.asked.get(src, ()):
            return
        seen = self.fu_seen.get((src, e))
        if seen is not None and (epoch, seq) <= seen:
            return
        self.fu_seen[(src, e)] = (epoch, seq)
        g = parse_filter(message.filter)
        if g is None:
            out.append(TraceRecord("chord.bad_filter", {"from": src, "error": "update"}))
            return
        if full:
            was_pending = src in self.pending
            self.pending.discard(src)
            if not was_pending and g == self.out[src]:
                return
            lazy = self.params.lazy_shrink and disjunction_covers(self.out[src], g)
            if not was_pending and lazy:
                return  # Terpstra et al. §4.4 "may choose not to update" (off by default, spec §6)
            self.out[src] = g
        else:
            clipped = self.clips.setdefault(src, {})
            if clipped.get(e) == g:
                return
            clipped[e] = g
        self._push_all(out, beyond=self.d(src))

    # ------------------------------------------------------------------------- queries
    def monitored_peers(self) -> Iterable[NodeId]:
        return sorted(self._peers()) if self.state in (JOINING, JOINED, LEAVING) else []

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.subs)

    def snapshot(self) -> Iterable[SnapshotRow]:
        if self.state != JOINED:
            return []
        neighbors = tuple(sorted(set(self.edges) | set(self.in_ends)))
        state = {
            "key": key_text(self.key),
            "successors": list(self.succ),
            "pred": self.pred(),
            "edges": {str(v): len(self.out[v]) for v in self.edges},
            # the subscription conjunctions per edge (maintenance intervals left out): the
            # routing-table size Terpstra et al. §2.1 compares the routing modes on
            "filters": {
                str(v): sum(not is_maintenance(c) for c in self.out[v]) for v in self.edges
            },
            "loopback": len(self.loop),
            "pending": len(self.pending),
            # RespChanges not yet acknowledged (Q2 of :mod:`.legitimacy` wants none)
            "unacked": len(self.rc_unacked),
        }
        return [SnapshotRow("", "ring", neighbors, state)]

    def statistics(self) -> NodeStatistics:
        neighbors = tuple(self.edges)
        return NodeStatistics(
            role=self.ctx.role,
            topics=tuple(sorted(self.subs)),
            delivered=self.delivered,
            neighbors={topic: neighbors for topic in sorted(self.subs)},
            received_by_type=dict(self.received),
            counters={
                **self.counters,
                "edges": len(self.edges),
                "in_edges": len(self.in_ends),
                "successors": len(self.succ),
                "conjunctions": sum(len(f) for f in self.out.values()),
            },
        )


#: messages a node's reactive stabilization may send at once, and per stabilize_period after
#: (ChordNode._announce): several times what a node of a 12-node ring sends while 12 join at
#: once (at most 66) or of a 40-node one (188)
PUSH_BURST = 256


def _backoff(period: float, attempt: int) -> float:
    """The wait before retry ``attempt`` + 1 of a request whose answer may be lost: period/8,
    doubling up to the period (ours; spec §7 retries every join_retry or location_timeout).

    A join's or a lookup's location notification, and a join notice (Terpstra et al. §5.1–5.2),
    travel the tree's edge filters, which while nodes join together may not cover a
    newcomer's maintenance interval yet (its filter wave, §4.4, is still on its way): the
    notification then reaches no owner and nobody answers. Such a loss lasts a filter wave, a
    few round trips, so the first retry comes after period/8 (0.25 s by default) and later
    ones back off to the period as before: a lost answer no longer costs 2 s of the ring's
    settling. (Chord, Stoica et al., SIGCOMM 2001, §4.4 and §5.1, leaves the retry of a
    join's lookup to the implementation.)"""
    return min(period, period / 8 * float(2 ** max(0, attempt)))


def _publication(event: Input) -> bool:
    """A publication issued or forwarded: it changes no ring state (nothing to announce)."""
    return isinstance(event, Publish) or (
        isinstance(event, Receive) and isinstance(event.message, Publication)
    )


def _arcs_meet(a: int, size_a: int, b: int, size_b: int) -> bool:
    """Arcs [a, a+|A|) and [b, b+|B|) meet ⟺ d(a,b) < |A| or d(b,a) < |B| (spec §2)."""
    return dist(a, b) < size_a or dist(b, a) < size_b


def create(ctx: NodeContext) -> StackNode:
    if ctx.params is None:
        ctx.params = ChordParams()
    return ChordNode(ctx)


def contacts(n: int, params: Any) -> tuple[NodeId, ...]:
    return (0,)
