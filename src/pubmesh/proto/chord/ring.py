"""The ring of a chord node: successor list, fingers, edges and ranges, maintenance
subscriptions, stabilize and a peer's leave (Terpstra et al. §4.1, §5; spec §3, §7–§9).

:class:`ChordRing` is one part of :class:`~pubmesh.proto.chord.node.ChordNode` (its module doc
tells how the parts work together). It owns the topology: the successor list (Terpstra et al.
§5.1), p_k(u) and the edges p(u)∖u sorted by distance with the end of each range r_u(v), the
send order, and the maintenance subscriptions (the location range and the join intervals,
spec §7), all of which it writes into the node's :class:`~.shared.ChordState` (the state's
methods read them: pred(u), the list length L, the far fingers). A change of the edges is an
:class:`~.shared.EdgesChanged` for the filters, which carve theirs from the old ranges
(:meth:`ChordFilters.carve <pubmesh.proto.chord.filters.ChordFilters.carve>`); a peer's
Leaving is a :class:`~.shared.PeerGone` for the node, which handles a failure across the
parts (``ChordNode._peer_down``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pubmesh.proto.chord.keys import MASK, SIZE, dist, finger_offset, key_text
from pubmesh.proto.chord.keys import M as KEY_BITS
from pubmesh.proto.chord.life import JOINED, StabilizeTick
from pubmesh.proto.chord.messages import Notification, SuccListReply, SuccListRequest
from pubmesh.proto.chord.shared import (
    ChordOut,
    ChordState,
    EdgesChanged,
    MaintenanceChanged,
    PeerGone,
)
from pubmesh.proto.content import PRESENT, Conjunction, validate
from pubmesh.proto.core import NodeId, Send, SetTimer, Timer

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


class ChordRing:
    """The topology of one chord node (module doc); forgotten on a rejoin."""

    def __init__(self, s: ChordState) -> None:
        self.s = s
        #: pred(u), the list, the in-neighbours and L after the last input (:meth:`announce`);
        #: None until the first input after a join (or a warm start) records them
        self.announced: tuple[NodeId | None, tuple[NodeId, ...], frozenset[NodeId], int] | None = (
            None
        )
        #: messages announce may still send now, and when that was last refilled
        self.push_budget = float(PUSH_BURST)
        self.push_refilled = 0.0

    # -------------------------------------------------------------------- list, fingers
    def learn(self, v: NodeId, out: ChordOut) -> None:
        """A node v joined: adopt it wherever it is closer than the current p_k or list entry
        (Terpstra et al. §5.2: "every u whose join interval matches recomputes p(u) and its
        list")."""
        if v == self.s.node_id:
            return
        d = self.s.d
        d_v = d(v)
        changed = False
        for k in range(1, KEY_BITS + 1):
            current = self.s.fingers[k - 1]
            if d_v >= finger_offset(k) and (current is None or d_v < d(current)):
                self.s.fingers[k - 1] = v
                changed = True
        if v not in self.s.succ:
            merged = self.s.clockwise([*self.s.succ, v])
            if merged != self.s.succ:
                self.s.succ = merged
                changed = True
        if changed:
            self.topology_changed(out)

    # ------------------------------------------------------------------ stabilize, leave
    def on_succ_list_request(self, src: NodeId, out: ChordOut) -> None:
        if self.s.alone():
            # Chord's notify: a node alone (a contact that lost its whole list,
            # which does not rejoin) takes back a live node that names it successor
            self.learn(src, out)
        if self.s.phase == JOINED:
            reply = SuccListReply(pred=self.s.pred(), successors=tuple(self.s.succ))
            out.append(Send(src, reply))

    def on_succ_list(self, src: NodeId, pred: object, successors: object, out: ChordOut) -> None:
        """Chord's stabilize (spec §7 "Periodic repair"): a predecessor of our successor that
        lies between us becomes the successor; the list becomes [successor] + its list.

        With the auto length (L = |p(u)| − 1, spec §3) L differs between nodes, and a
        successor's list may be shorter than our L − 1; the list would then stay short for
        ever (found at N = 200 built by joins, bench/bench_chord_joins.py). So a list still
        short of L after a reply that did not wrap around the ring to us is extended by
        asking its last entry for its list, whose answer adds the nodes beyond it (ours)."""
        s = self.s
        if s.phase != JOINED or not self.s.succ or not isinstance(successors, tuple | list):
            return
        d = s.d
        if src != self.s.succ[0]:
            if src == self.s.succ[-1] and len(self.s.succ) < self.s.succ_len():
                beyond = [x for x in successors if isinstance(x, int) and d(x) > d(src)]
                new = self.s.clockwise([*self.s.succ, *beyond])
                self._set_succ(new, successors, out, extension=True)
            return
        nodes = [src, *(x for x in successors if isinstance(x, int) and x != s.node_id)]
        # entries beyond the reply's last one stay: a successor with a shorter L cannot
        # vouch for them, and a dead one is dropped on its PeerDown
        reach = max(d(x) for x in nodes)
        nodes += [x for x in self.s.succ if d(x) > reach]
        if isinstance(pred, int) and pred != s.node_id and d(pred) < d(src):
            nodes.append(pred)
            self.learn(pred, out)
        self._set_succ(self.s.clockwise(nodes), successors, out, extension=False)

    def _set_succ(
        self,
        new: list[NodeId],
        reply: tuple[object, ...] | list[object],
        out: ChordOut,
        *,
        extension: bool,
    ) -> None:
        """Adopt a successor list from a stabilize reply, then extend it if still short."""
        grew = len(new) > len(self.s.succ)
        if new != self.s.succ:
            self.s.succ = new
            self.topology_changed(out)
        wrapped = self.s.node_id in reply  # the reply reached round the ring to us
        short = 0 < len(self.s.succ) < self.s.succ_len()
        # an extension reply asks further only if it added someone: no ping-pong with a last
        # entry that knows nobody beyond itself
        if short and not wrapped and (grew or not extension):
            out.append(Send(self.s.succ[-1], SuccListRequest()))

    def announce(self, now: float, out: ChordOut) -> None:
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
        p = self.s.params
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

    def _push_changes(self, out: ChordOut) -> None:
        """The messages of :meth:`announce` for the change since the last input."""
        pred = self.s.pred()
        succ = tuple(self.s.succ)
        ins = frozenset(self.s.in_ends)
        length = self.s.succ_len()
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
        d, key_of = self.s.d, self.s.key_of
        moved_in = old is not None and pred != old and d(pred) > d(old)
        notify = (ins if moved_in else new_ins) - {pred}
        if notify:
            attributes = {FIELD_JOIN: key_text(key_of(pred)), FIELD_REQ: pred}
            for v in sorted(notify):
                end = (key_of(v) + 1) & MASK
                notice = Notification(topic=JOIN, attributes=attributes, end=end, hops=0)
                out.append(Send(v, notice))

    def fire(self, timer: Timer, out: ChordOut) -> None:
        """The ring's timer: Chord's periodic stabilize (spec §7 "Periodic repair")."""
        match timer:
            case StabilizeTick():
                if self.s.phase == JOINED and self.s.succ:
                    out.append(Send(self.s.succ[0], SuccListRequest()))
                out.append(SetTimer(self.s.params.stabilize_period, timer))

    def on_leaving(self, src: NodeId, pred: object, successors: object, out: ChordOut) -> None:
        """Leaving (spec §9): as PeerDown without the detection delay; the predecessor splices
        in the leaver's list, the successor takes its predecessor as a hint."""
        if self.s.phase != JOINED:
            return
        if self.s.succ and src == self.s.succ[0] and isinstance(successors, tuple | list):
            rest = [x for x in self.s.succ if x != src]
            spliced = [x for x in successors if isinstance(x, int) and x != src]
            self.s.succ = self.s.clockwise([*rest, *spliced])  # empty: the node rejoins
        if isinstance(pred, int) and pred != self.s.node_id and self.s.pred() == src:
            self.s.pred_hint = pred
        out.route(PeerGone(src))

    # ------------------------------------------------------------------------ topology
    def topology_changed(self, out: ChordOut) -> None:
        """The list or a finger changed: cut the list to L, read the near fingers off it,
        install the edges and the maintenance subscriptions."""
        # the list is cut to L only where it is rebuilt (clockwise): an auto L that shrinks
        # while failed fingers are being replaced must not throw away live backups
        self._fingers_from_list()
        me, d = self.s.node_id, self.s.d
        edges = sorted(
            {f for f in self.s.fingers if f is not None and f != me},
            key=lambda x: (d(x), x),
        )
        if edges != self.s.edges:
            self._install_edges(edges, out)
        self.maintenance_changed(out)

    def _fingers_from_list(self) -> None:
        """p_k for D_k within the list's span is the first list entry at least D_k away (spec
        §3, §7.5); the far ones are left as they are."""
        d = self.s.d
        span = d(self.s.succ[-1]) if self.s.succ else 0
        distances = [d(x) for x in self.s.succ]
        for k in range(1, KEY_BITS + 1):
            offset = finger_offset(k)
            if offset > span:
                continue  # far fingers: looked up, learnt from join notices, dropped on failure
            self.s.fingers[k - 1] = next(
                x for x, dx in zip(self.s.succ, distances, strict=True) if dx >= offset
            )

    def _install_edges(self, edges: list[NodeId], out: ChordOut) -> None:
        """Edge change (spec §7, Terpstra et al. §5.2): new ranges and send order, then the
        filters carved from the old ones and RespChange to every peer whose range changed
        (:meth:`ChordFilters.carve <pubmesh.proto.chord.filters.ChordFilters.carve>`)."""
        old_edges, old_ends = self.s.edges, self.s.ends
        self.s.edges, self.s.ends = edges, self._range_ends(edges)
        self.s.order = self._send_order()
        out.route(EdgesChanged(old_edges, old_ends))

    def _range_ends(self, edges: list[NodeId]) -> dict[NodeId, int]:
        """r_u(v_i) = [key(v_i), key(v_{i+1})), the last one ending at key(u) (§3)."""
        key_of = self.s.key_of
        return {
            v: key_of(edges[i + 1]) if i + 1 < len(edges) else self.s.key
            for i, v in enumerate(edges)
        }

    def _send_order(self) -> list[NodeId]:
        """The edges in decreasing range size, ties by distance (Terpstra et al. §4.3)."""
        d, key_of = self.s.d, self.s.key_of
        return sorted(
            self.s.edges,
            key=lambda v: (-(dist(key_of(v), self.s.ends[v]) or SIZE), d(v), v),
        )

    def maintenance_changed(self, out: ChordOut) -> None:
        """Recompute the maintenance subscriptions (spec §7): the location range
        (key(pred), key(u)] (everything while alone), and the join intervals where a newcomer
        would become one of u's fingers or list entries."""
        key_of = self.s.key_of
        conjs: list[Conjunction] = []
        if self.s.phase == JOINED:
            if self.s.alone():
                conjs.append(_interval(LOCATION, FIELD_LOC, None, None, "le"))
            else:
                pred = self.s.pred()
                if pred is not None:
                    conjs += _arc_conjunctions(LOCATION, FIELD_LOC, key_of(pred), self.s.key, "le")
            last_k: dict[NodeId, int] = {}
            undefined = 0
            for k in range(1, KEY_BITS + 1):
                f = self.s.fingers[k - 1]
                if f is None:
                    undefined = k
                else:
                    last_k[f] = k
            d = self.s.d
            for f in sorted(last_k, key=lambda x: (d(x), x)):
                lo = (self.s.key + finger_offset(last_k[f])) & MASK
                conjs += _arc_conjunctions(JOIN, FIELD_JOIN, lo, key_of(f), "lt")
            if undefined:
                lo = (self.s.key + finger_offset(undefined)) & MASK
                conjs += _arc_conjunctions(JOIN, FIELD_JOIN, lo, self.s.key, "lt")
            if self.s.succ:
                lo = (self.s.key + 1) & MASK
                conjs += _arc_conjunctions(JOIN, FIELD_JOIN, lo, key_of(self.s.succ[-1]), "lt")
        maintenance = tuple(sorted(set(conjs)))
        if maintenance != self.s.maintenance:
            self.s.maintenance = maintenance
            out.route(MaintenanceChanged())
