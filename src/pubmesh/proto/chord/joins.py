"""Joins and lookups of a chord node: the JoinRequest, location notifications and their
replies, join notices, and the far fingers' lookups and fix_fingers (Terpstra et al. §5.1–5.2;
spec §7).

:class:`ChordJoins` is one part of :class:`~pubmesh.proto.chord.node.ChordNode` (its module
doc tells how the parts work together). It owns the request ids, the join's retries and the
pending lookups; what a join or a lookup finds goes into the list and fingers of the node's
:class:`~.shared.ChordState`, with a :class:`~.shared.TopologyChanged` for the ring, and its
notifications go out through the publisher (:class:`~.shared.Notify`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pubmesh.proto.chord.keys import MASK, dist, finger_offset, key_text, text_key
from pubmesh.proto.chord.life import (
    JOINED,
    JOINING,
    FixTick,
    JoinTick,
    LookupTimeout,
    backoff,
)
from pubmesh.proto.chord.messages import JoinRequest, LocationReply
from pubmesh.proto.chord.ring import FIELD_JOIN, FIELD_LOC, FIELD_REQ, FIELD_RID, JOIN, LOCATION
from pubmesh.proto.chord.shared import (
    ChordOut,
    ChordState,
    Learned,
    Notify,
    TopologyChanged,
)
from pubmesh.proto.content import matches
from pubmesh.proto.core import NodeId, Send, SetTimer, Timer


@dataclass(slots=True)
class _Lookup:
    """A pending location lookup of finger ``k`` (the join's own lookup is ``join_rid``)."""

    k: int
    target: int
    tries: int
    best: int | None = None


class ChordJoins:
    """The joins and lookups of one chord node (module doc); forgotten on a rejoin."""

    def __init__(self, s: ChordState) -> None:
        self.s = s
        self.next_rid = 1
        self.join_rid = 0
        self.join_notices = 0
        self.join_tick = 0
        #: JoinRequests sent since the last Start or rejoin (the first retry waits least)
        self.join_attempts = 0
        self.lookups: dict[int, _Lookup] = {}
        self.fix_cursor = 0

    def request_join(self, contact: NodeId, out: ChordOut) -> None:
        """Join through ``contact`` (spec §7 step 1): a JoinRequest, retried every join_retry.
        The node has set its phase (JOINING); it keeps its phase, a part never writes it."""
        self.join_rid = self._rid()
        out.append(Send(contact, JoinRequest(rid=self.join_rid)))
        self.join_attempts = 1
        self._arm_join_tick(0, out)

    def _arm_join_tick(self, attempt: int, out: ChordOut) -> None:
        self.join_tick += 1
        delay = backoff(self.s.params.join_retry, attempt)
        out.append(SetTimer(delay, JoinTick(self.s.life, self.join_tick)))

    def _rid(self) -> int:
        rid = self.next_rid
        self.next_rid += 1
        return rid

    # ------------------------------------------------------------------ joins and lookups
    def on_join_request(self, src: NodeId, rid: int, out: ChordOut) -> None:
        """The contact publishes a location notification for key(v)+1 (spec §7 step 2)."""
        s = self.s
        if s.phase != JOINED or not isinstance(rid, int):
            return
        s.count("join_requests")
        out.route(
            Notify(
                LOCATION,
                {
                    FIELD_LOC: key_text((s.key_of(src) + 1) & MASK),
                    FIELD_REQ: src,
                    FIELD_RID: rid,
                },
            )
        )

    def lookup(self, k: int, out: ChordOut) -> None:
        """Resolve finger k by a location notification through u's own tree (spec §7.5)."""
        target = (self.s.key + finger_offset(k)) & MASK
        if any(look.k == k for look in self.lookups.values()):
            return
        rid = self._rid()
        self.lookups[rid] = _Lookup(k, target, 1)
        self._send_lookup(rid, target, out)

    def forget_best(self, x: NodeId) -> None:
        """``x`` failed: no lookup keeps it as its best answer (spec §8.1)."""
        for look in self.lookups.values():
            if look.best == x:
                look.best = None

    def _send_lookup(self, rid: int, target: int, out: ChordOut) -> None:
        s = self.s
        delay = backoff(s.params.location_timeout, self.lookups[rid].tries - 1)
        out.append(SetTimer(delay, LookupTimeout(s.life, rid)))
        out.route(
            Notify(
                LOCATION,
                {FIELD_LOC: key_text(target), FIELD_REQ: s.node_id, FIELD_RID: rid},
            )
        )

    def answers_join(self, src: NodeId, reply: LocationReply) -> bool:
        """Whether ``reply`` is the owner's answer to this node's join (while it joins)."""
        return reply.rid == self.join_rid and src != self.s.node_id

    def on_location_reply(self, src: NodeId, reply: LocationReply, out: ChordOut) -> None:
        """A LocationReply to one of the far fingers' lookups (the join's own answer is
        :meth:`joined`'s)."""
        s = self.s
        rid = reply.rid
        look = self.lookups.get(rid)
        if look is None or s.phase != JOINED:
            return
        look.tries = -1  # answered: the timeout closes it
        # spec §7.5: accept x only if x ≠ u and d(u,x) ≥ d(u,t); keep the least d (§8.1)
        if src == s.node_id or s.d(src) < dist(self.s.key, look.target):
            return
        if look.best is not None and s.d(look.best) <= s.d(src):
            return
        look.best = src
        if s.fingers[look.k - 1] != src:
            s.fingers[look.k - 1] = src
            out.route(TopologyChanged())

    def joined(self, owner: NodeId, reply: LocationReply, out: ChordOut) -> None:
        """LocationReply to the join (spec §7 step 4–6), the node joined (its phase set):
        successor = the owner, list = [owner] + the owner's list, predecessor hint = the
        owner's predecessor; then the far fingers are looked up and the join notice goes
        out."""
        s = self.s
        s.count("joins")
        candidates = [owner, *(x for x in reply.successors if isinstance(x, int))]
        s.succ = s.clockwise(candidates)
        pred = reply.pred
        s.pred_hint = pred if isinstance(pred, int) and pred != s.node_id else owner
        out.route(TopologyChanged())
        for k in s.far_fingers():
            self.lookup(k, out)
        self.join_notices = 0
        self._join_notice(out)
        self._arm_join_tick(0, out)

    def _join_notice(self, out: ChordOut) -> None:
        self.join_notices += 1
        attributes = {FIELD_JOIN: key_text(self.s.key), FIELD_REQ: self.s.node_id}
        out.route(Notify(JOIN, attributes))

    def on_notification(self, topic: str, attributes: dict[str, Any], out: ChordOut) -> None:
        """The local half of a maintenance notification: the owner of a location answers,
        a node whose join interval holds a newcomer adopts it (Terpstra et al. §5.1–5.2)."""
        s = self.s
        requester = attributes.get(FIELD_REQ)
        if not isinstance(requester, int) or isinstance(requester, bool):
            return
        if topic == LOCATION:
            target = text_key(attributes.get(FIELD_LOC))
            rid = attributes.get(FIELD_RID)
            if target is None or not isinstance(rid, int) or not self._owns(target):
                return
            reply = LocationReply(rid=rid, target=target, pred=s.pred(), successors=tuple(s.succ))
            if requester == s.node_id:
                self.on_location_reply(s.node_id, reply, out)
            else:
                out.append(Send(requester, reply))
        elif topic == JOIN:
            joined = text_key(attributes.get(FIELD_JOIN))
            if joined is None or requester == s.node_id or joined != s.key_of(requester):
                return
            if any(matches(c, attributes) for c in s.maintenance):
                out.route(Learned(requester))

    def _owns(self, target: int) -> bool:
        """Is ``target`` in u's Chord ownership range (key(pred), key(u)]?"""
        s = self.s
        if s.alone():
            return True
        pred = s.pred()
        if pred is None:
            return False
        lo = self.s.key_of(pred)
        return 0 < dist(lo, target) <= dist(lo, self.s.key)

    # --------------------------------------------------------------------------- timers
    def fire(self, timer: Timer, out: ChordOut) -> None:
        """The join's retries, the lookups' timeouts and fix_fingers."""
        s = self.s
        p = s.params
        match timer:
            case JoinTick(tick=tick) if tick == self.join_tick:
                if s.phase == JOINING:
                    self.join_rid = self._rid()
                    out.append(Send(s.contacts[0], JoinRequest(rid=self.join_rid)))
                    self._arm_join_tick(self.join_attempts, out)
                    self.join_attempts += 1
                elif s.phase == JOINED and self.join_notices < p.lookup_tries:
                    # every joiner sends lookup_tries notices, backing off (backoff), not
                    # only until its predecessor answers: a notice is a publication without
                    # an answer (Terpstra et al. §5.2), and one that met a filter not yet covering
                    # a node's join interval (nodes joining together) is lost for that node
                    # alone, which then lacked the joiner as a far finger until fix_fingers
                    # came round to it (ours; the spec resent only to reach the predecessor)
                    self._join_notice(out)
                    self._arm_join_tick(self.join_notices - 1, out)
            case LookupTimeout(rid=rid):
                look = self.lookups.get(rid)
                if look is None:
                    return
                if look.tries < 0 or look.tries >= p.lookup_tries or s.phase != JOINED:
                    del self.lookups[rid]
                    # only wrapped answers: no node lies D_k away, p_k is undefined
                    wrapped = look.tries < 0 and look.best is None
                    if wrapped and s.drop_far_finger(look.k):
                        out.route(TopologyChanged())
                    return
                look.tries += 1
                self._send_lookup(rid, look.target, out)
            case FixTick():
                far = s.far_fingers() if s.phase == JOINED else []
                if far:
                    self.fix_cursor = (self.fix_cursor + 1) % len(far)
                    self.lookup(far[self.fix_cursor], out)
                out.append(SetTimer(p.fix_period, timer))
