"""The ring of a chord node: successor list, fingers, edges and ranges, maintenance
subscriptions, stabilize, leave and failures (Terpstra et al. §4.1, §5; spec §3, §7–§9).

:class:`ChordRing` is one part of :class:`~pubmesh.proto.chord.node.ChordNode` (its module doc
tells how the parts work together). It owns the topology: the successor list (Terpstra et al.
§5.1), p_k(u) and the edges p(u)∖u sorted by distance with the end of each range r_u(v), the
send order, and the maintenance subscriptions (the location range and the join intervals,
spec §7). A change of the edges installs the new ranges here and has the filters carved from
the old ones (:meth:`ChordFilters.carve <pubmesh.proto.chord.filters.ChordFilters.carve>`).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pubmesh.proto.chord.keys import MASK, SIZE, dist, finger_offset, key_text
from pubmesh.proto.chord.keys import M as KEY_BITS
from pubmesh.proto.chord.life import JOINED, StabilizeTick
from pubmesh.proto.chord.messages import Notification, SuccListReply, SuccListRequest
from pubmesh.proto.content import PRESENT, Conjunction, validate
from pubmesh.proto.core import NodeId, Output, Part, Send, SetTimer, Timer

if TYPE_CHECKING:
    from pubmesh.proto.chord.node import ChordNode

#: the maintenance notifications' topics and fields (spec §7)
LOCATION = "$chord.location"
JOIN = "$chord.join"
FIELD_LOC = "$loc"
FIELD_JOIN = "$join"
FIELD_REQ = "$req"
FIELD_RID = "$rid"

#: messages a node's reactive stabilization may send at once, and per stabilize_period after
#: (ChordRing.announce): several times what a node of a 12-node ring sends while 12 join at
#: once (at most 66) or of a 40-node one (188)
PUSH_BURST = 256


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


class ChordRing(Part["ChordNode"]):
    """The topology of one chord node (module doc); forgotten on a rejoin."""

    def __init__(self, node: ChordNode) -> None:
        super().__init__(node)
        self.key = node.key  # key(u), fixed for the node's life
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
        self.maintenance: tuple[Conjunction, ...] = ()
        #: pred(u), the list, the in-neighbours and L after the last input (:meth:`announce`);
        #: None until the first input after a join (or a warm start) records them
        self.announced: tuple[NodeId | None, tuple[NodeId, ...], frozenset[NodeId], int] | None = (
            None
        )
        #: messages announce may still send now, and when that was last refilled
        self.push_budget = float(PUSH_BURST)
        self.push_refilled = 0.0

    # ------------------------------------------------------------------------- queries
    def succ_len(self) -> int:
        """L: the parameter, or auto = max(4, |p(u)| − 1) (spec §3)."""
        return self.n.params.succ_len or max(4, len(self.edges))

    def pred(self) -> NodeId | None:
        """pred(u): the in-neighbour closest counter-clockwise, else the hint (spec §3)."""
        in_ends = self.n.filters.in_ends
        if in_ends:
            key_of = self.n.key_of
            return min(in_ends, key=lambda x: (dist(key_of(x), self.key), x))
        if self.pred_hint is None and 0 < len(self.succ) < self.succ_len():
            # a list shorter than L holds the whole ring (as in far_fingers), so its last
            # entry is the predecessor. Without this a node that has a successor but no
            # in-neighbour yet (the contact just after the first joiner adopted it) owned no
            # key: location notifications for a join found no owner, and the joiner waited a
            # join_retry for nothing (ours; Chord's ownership (pred, n], Stoica et al.,
            # SIGCOMM 2001, §4.2, needs a predecessor)
            return self.succ[-1]
        return self.pred_hint

    def alone(self) -> bool:
        return self.n.state == JOINED and not self.succ

    def peers(self) -> set[NodeId]:
        peers = set(self.edges) | set(self.n.filters.in_ends) | set(self.succ)
        peers.discard(self.n.node_id)
        return peers

    # -------------------------------------------------------------------- list, fingers
    def _learn(self, v: NodeId, out: list[Output]) -> None:
        """A node v joined: adopt it wherever it is closer than the current p_k or list entry
        (Terpstra et al. §5.2: "every u whose join interval matches recomputes p(u) and its
        list")."""
        if v == self.n.node_id:
            return
        d = self.n.d
        d_v = d(v)
        changed = False
        for k in range(1, KEY_BITS + 1):
            current = self.fingers[k - 1]
            if d_v >= finger_offset(k) and (current is None or d_v < d(current)):
                self.fingers[k - 1] = v
                changed = True
        if v not in self.succ:
            merged = self.clockwise([*self.succ, v])
            if merged != self.succ:
                self.succ = merged
                changed = True
        if changed:
            self.topology_changed(out)

    def clockwise(self, nodes: Iterable[NodeId]) -> list[NodeId]:
        """Distinct nodes other than u, by distance, cut to L."""
        me, d = self.n.node_id, self.n.d
        seen = sorted({x for x in nodes if x != me}, key=lambda x: (d(x), x))
        return seen[: self.succ_len()]

    def drop_far_finger(self, k: int) -> bool:
        """Mark far finger k undefined; True if that changed it."""
        if self.fingers[k - 1] is None or k not in self.far_fingers():
            return False
        self.fingers[k - 1] = None
        return True

    def far_fingers(self) -> list[int]:
        """The k whose p_k lies beyond the successor list (only if the list is full: a short
        list holds the whole ring)."""
        if len(self.succ) < self.succ_len():
            return []
        span = self.n.d(self.succ[-1])
        return [k for k in range(1, KEY_BITS + 1) if finger_offset(k) > span]

    # ------------------------------------------------------------------ stabilize, leave
    def on_succ_list_request(self, src: NodeId, out: list[Output]) -> None:
        if self.alone():
            # Chord's notify: a node alone (a contact that lost its whole list,
            # which does not rejoin) takes back a live node that names it successor
            self._learn(src, out)
        if self.n.state == JOINED:
            reply = SuccListReply(pred=self.pred(), successors=tuple(self.succ))
            out.append(Send(src, reply))

    def on_succ_list(
        self, src: NodeId, pred: object, successors: object, out: list[Output]
    ) -> None:
        """Chord's stabilize (spec §7 "Periodic repair"): a predecessor of our successor that
        lies between us becomes the successor; the list becomes [successor] + its list.

        With the auto length (L = |p(u)| − 1, spec §3) L differs between nodes, and a
        successor's list may be shorter than our L − 1; the list would then stay short for
        ever (found at N = 200 built by joins, bench/bench_chord_joins.py). So a list still
        short of L after a reply that did not wrap around the ring to us is extended by
        asking its last entry for its list, whose answer adds the nodes beyond it (ours)."""
        node = self.n
        if node.state != JOINED or not self.succ or not isinstance(successors, tuple | list):
            return
        d = node.d
        if src != self.succ[0]:
            if src == self.succ[-1] and len(self.succ) < self.succ_len():
                beyond = [x for x in successors if isinstance(x, int) and d(x) > d(src)]
                new = self.clockwise([*self.succ, *beyond])
                self._set_succ(new, successors, out, extension=True)
            return
        nodes = [src, *(x for x in successors if isinstance(x, int) and x != node.node_id)]
        # entries beyond the reply's last one stay: a successor with a shorter L cannot
        # vouch for them, and a dead one is dropped on its PeerDown
        reach = max(d(x) for x in nodes)
        nodes += [x for x in self.succ if d(x) > reach]
        if isinstance(pred, int) and pred != node.node_id and d(pred) < d(src):
            nodes.append(pred)
            self._learn(pred, out)
        self._set_succ(self.clockwise(nodes), successors, out, extension=False)

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
            self.topology_changed(out)
        wrapped = self.n.node_id in reply  # the reply reached round the ring to us
        short = 0 < len(self.succ) < self.succ_len()
        # an extension reply asks further only if it added someone: no ping-pong with a last
        # entry that knows nobody beyond itself
        if short and not wrapped and (grew or not extension):
            out.append(Send(self.succ[-1], SuccListRequest()))

    def announce(self, now: float, out: list[Output]) -> None:
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
        p = self.n.params
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
        """The messages of :meth:`announce` for the change since the last input."""
        pred = self.pred()
        succ = tuple(self.succ)
        ins = frozenset(self.n.filters.in_ends)
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
        d, key_of = self.n.d, self.n.key_of
        moved_in = old is not None and pred != old and d(pred) > d(old)
        notify = (ins if moved_in else new_ins) - {pred}
        if notify:
            attributes = {FIELD_JOIN: key_text(key_of(pred)), FIELD_REQ: pred}
            for v in sorted(notify):
                end = (key_of(v) + 1) & MASK
                notice = Notification(topic=JOIN, attributes=attributes, end=end, hops=0)
                out.append(Send(v, notice))

    def fire(self, timer: Timer, out: list[Output]) -> None:
        """The ring's timer: Chord's periodic stabilize (spec §7 "Periodic repair")."""
        match timer:
            case StabilizeTick():
                if self.n.state == JOINED and self.succ:
                    out.append(Send(self.succ[0], SuccListRequest()))
                out.append(SetTimer(self.n.params.stabilize_period, timer))

    def on_leaving(self, src: NodeId, pred: object, successors: object, out: list[Output]) -> None:
        """Leaving (spec §9): as PeerDown without the detection delay; the predecessor splices
        in the leaver's list, the successor takes its predecessor as a hint."""
        if self.n.state != JOINED:
            return
        if self.succ and src == self.succ[0] and isinstance(successors, tuple | list):
            rest = [x for x in self.succ if x != src]
            spliced = [x for x in successors if isinstance(x, int) and x != src]
            self.succ = self.clockwise([*rest, *spliced])  # empty: peer_down rejoins
        if isinstance(pred, int) and pred != self.n.node_id and self.pred() == src:
            self.pred_hint = pred
        self.peer_down(src, out)

    # ------------------------------------------------------------------------ failures
    def peer_down(self, x: NodeId, out: list[Output]) -> None:
        """PeerDown (spec §8): drop x everywhere; x's range goes to its counter-clockwise
        neighbour with the union filter (in :meth:`_install_edges`), far fingers that were x
        are looked up again, the list refills from the new successor."""
        node = self.n
        filters, joins = node.filters, node.joins
        filters.rc_unacked.pop(x, None)  # x cannot acknowledge anything any more
        was_successor = bool(self.succ) and self.succ[0] == x
        known = x in self.succ or x in self.ends or x in filters.in_ends or x == self.pred_hint
        if not known and x not in self.fingers:
            return  # a stranger (or, while joining, the contact: the JoinTick retries)
        self.succ = [y for y in self.succ if y != x]
        filters._forget_in(x)
        if self.pred_hint == x:
            self.pred_hint = None
        lost = [k for k in range(1, KEY_BITS + 1) if self.fingers[k - 1] == x]
        for k in lost:
            self.fingers[k - 1] = None
        for look in joins.lookups.values():
            if look.best == x:
                look.best = None
        if node.state != JOINED:
            return
        # the successor is always an edge, so a node that had one still has self.ends here
        if not self.succ and self.ends and node.contacts and node.contacts[0] != node.node_id:
            node._rejoin(out)
            return
        self.topology_changed(out)
        filters.rc_unacked.pop(x, None)  # the edge change told x its edge is gone: it cannot ack
        filters._update_clips(out)  # x's wanted ends are gone with it
        far = set(self.far_fingers())
        for k in lost:
            if k in far and self.fingers[k - 1] is None:
                joins._lookup(k, out)
        if was_successor and self.succ:
            out.append(Send(self.succ[0], SuccListRequest()))

    # ------------------------------------------------------------------------ topology
    def topology_changed(self, out: list[Output]) -> None:
        """The list or a finger changed: cut the list to L, read the near fingers off it,
        install the edges and the maintenance subscriptions."""
        # the list is cut to L only where it is rebuilt (clockwise): an auto L that shrinks
        # while failed fingers are being replaced must not throw away live backups
        self._fingers_from_list()
        me, d = self.n.node_id, self.n.d
        edges = sorted(
            {f for f in self.fingers if f is not None and f != me},
            key=lambda x: (d(x), x),
        )
        if edges != self.edges:
            self._install_edges(edges, out)
        self._maintenance_changed(out)

    def _fingers_from_list(self) -> None:
        """p_k for D_k within the list's span is the first list entry at least D_k away (spec
        §3, §7.5); the far ones are left as they are."""
        d = self.n.d
        span = d(self.succ[-1]) if self.succ else 0
        distances = [d(x) for x in self.succ]
        for k in range(1, KEY_BITS + 1):
            offset = finger_offset(k)
            if offset > span:
                continue  # far fingers: looked up, learnt from join notices, dropped on failure
            self.fingers[k - 1] = next(
                x for x, dx in zip(self.succ, distances, strict=True) if dx >= offset
            )

    def _install_edges(self, edges: list[NodeId], out: list[Output]) -> None:
        """Edge change (spec §7, Terpstra et al. §5.2): new ranges and send order, then the
        filters carved from the old ones and RespChange to every peer whose range changed
        (:meth:`ChordFilters.carve <pubmesh.proto.chord.filters.ChordFilters.carve>`)."""
        old_edges, old_ends = self.edges, self.ends
        self.edges, self.ends = edges, self._range_ends(edges)
        self.order = self._send_order()
        self.n.filters.carve(old_edges, old_ends, out)

    def _range_ends(self, edges: list[NodeId]) -> dict[NodeId, int]:
        """r_u(v_i) = [key(v_i), key(v_{i+1})), the last one ending at key(u) (§3)."""
        key_of = self.n.key_of
        return {
            v: key_of(edges[i + 1]) if i + 1 < len(edges) else self.key for i, v in enumerate(edges)
        }

    def _send_order(self) -> list[NodeId]:
        """The edges in decreasing range size, ties by distance (Terpstra et al. §4.3)."""
        d, key_of = self.n.d, self.n.key_of
        return sorted(
            self.edges,
            key=lambda v: (-(dist(key_of(v), self.ends[v]) or SIZE), d(v), v),
        )

    def _maintenance_changed(self, out: list[Output]) -> None:
        """Recompute the maintenance subscriptions (spec §7): the location range
        (key(pred), key(u)] (everything while alone), and the join intervals where a newcomer
        would become one of u's fingers or list entries."""
        key_of = self.n.key_of
        conjs: list[Conjunction] = []
        if self.n.state == JOINED:
            if self.alone():
                conjs.append(_interval(LOCATION, FIELD_LOC, None, None, "le"))
            else:
                pred = self.pred()
                if pred is not None:
                    conjs += _arc_conjunctions(LOCATION, FIELD_LOC, key_of(pred), self.key, "le")
            last_k: dict[NodeId, int] = {}
            undefined = 0
            for k in range(1, KEY_BITS + 1):
                f = self.fingers[k - 1]
                if f is None:
                    undefined = k
                else:
                    last_k[f] = k
            d = self.n.d
            for f in sorted(last_k, key=lambda x: (d(x), x)):
                lo = (self.key + finger_offset(last_k[f])) & MASK
                conjs += _arc_conjunctions(JOIN, FIELD_JOIN, lo, key_of(f), "lt")
            if undefined:
                lo = (self.key + finger_offset(undefined)) & MASK
                conjs += _arc_conjunctions(JOIN, FIELD_JOIN, lo, self.key, "lt")
            if self.succ:
                lo = (self.key + 1) & MASK
                conjs += _arc_conjunctions(JOIN, FIELD_JOIN, lo, key_of(self.succ[-1]), "lt")
        maintenance = tuple(sorted(set(conjs)))
        if maintenance != self.maintenance:
            self.maintenance = maintenance
            self.n.filters.loop_changed(out)
