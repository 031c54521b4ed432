"""The filters of a chord node: the edge filters f(u→v) and their clipped variants, the
loopback, h for each in-neighbour's range, and the RespChange/FilterUpdate exchange
(Terpstra et al. §4.2–4.4; spec §4, §6, §7).

:class:`ChordFilters` is one part of :class:`~pubmesh.proto.chord.node.ChordNode` (its module
doc tells how the parts work together). It owns everything filter-shaped: f(u→v) per edge and
the edges still pending, the clipped filters and the ends asked for, the subscription edges
s(u) (the range end and the clipped ends each in-neighbour gives), the loopback, the last h
sent to each in-neighbour, and the sequence numbers of both messages. f(u→v), its clipped
variants and s(u) live in the node's :class:`~.shared.ChordState`, which the publisher routes
by and the ring reads pred(u) from; the edges and their ranges are the ring's, read there
too. A RespChange that moves pred(u) is an :class:`~.shared.OwnRangeChanged` for the ring.

Clipped filters
===============
Terpstra et al. §4.4 (and spec §4) put the whole f(v→x) into h_u(v) for every x whose range meets
r_u(v). The last such x's range reaches past r_u(v), and in a correct ring the farthest
fingers' ranges chain round the ring (9→14→0→9 at N = 30), so filter updates would circle
for ever and keep removed conjunctions alive. So v also asks each out-neighbour x for its
filter *clipped* at the range ends v's own in-neighbours need (RespChange.clips), and x
answers one FilterUpdate per end (FilterUpdate.end). h for a range [key(v), e) then uses, for
each x inside it, x's filter up to e or up to the end of r_v(x), whichever comes first
(:meth:`ChordFilters.below`): every filter depends only on filters of strictly smaller ranges,
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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pubmesh.proto.chord.keys import SIZE, dist
from pubmesh.proto.chord.life import JOINED, LEAVING, LEFT, RefreshTick, RespRetry
from pubmesh.proto.chord.messages import FilterUpdate, RespChange
from pubmesh.proto.chord.routing import MATCH_ALL, PrefixChain, parse_filter, reduce_edge, texts
from pubmesh.proto.chord.shared import ChordOut, ChordState, OwnRangeChanged
from pubmesh.proto.content import (
    Conjunction,
    Disjunction,
    FilterError,
    disjunction_covers,
    validate,
    with_topic,
)
from pubmesh.proto.core import NodeId, Send, SetTimer, Timer, TraceRecord


def _arcs_meet(a: int, size_a: int, b: int, size_b: int) -> bool:
    """Arcs [a, a+|A|) and [b, b+|B|) meet ⟺ d(a,b) < |A| or d(b,a) < |B| (spec §2)."""
    return dist(a, b) < size_a or dist(b, a) < size_b


class ChordFilters:
    """The filters of one chord node (module doc); forgotten on a rejoin."""

    def __init__(self, s: ChordState) -> None:
        self.s = s
        p = s.params
        #: the edges still forwarding everything until their first update (f(u→v) itself
        #: and its clipped variants are the state's ``edge_filters`` and ``clipped``)
        self.pending: set[NodeId] = set()
        #: the ends asked of each v for clipped filters
        self.asked: dict[NodeId, tuple[int, ...]] = {}
        #: the clipped ends each in-neighbour asks for (the end of its range is the state's
        #: ``in_ends``)
        self.in_clips: dict[NodeId, tuple[int, ...]] = {}
        self.loop: Disjunction = ()
        #: the reductions behind h, kept per prefix of the edges (:meth:`union`)
        self.chain = PrefixChain(max_conj=p.max_conj, max_in=p.max_in)
        #: last h sent to each in-neighbour, and the message (re-sent by the refresh)
        self.sent: dict[tuple[NodeId, int], Disjunction] = {}
        self.sent_msg: dict[tuple[NodeId, int], FilterUpdate] = {}
        self.fu_seq: dict[NodeId, int] = {}
        self.fu_seen: dict[tuple[NodeId, int], tuple[int, int]] = {}
        #: RespChange: our sequence numbers, the unacknowledged ones, and the latest received
        self.rc_seq: dict[NodeId, int] = {}
        self.rc_unacked: dict[NodeId, RespChange] = {}
        self.rc_seen: dict[NodeId, tuple[int, int]] = {}

    def _reduce(self, conjunctions: Iterable[Conjunction], *, bound: bool) -> Disjunction:
        p = self.s.params
        return reduce_edge(
            conjunctions, p.routing, max_conj=p.max_conj, max_in=p.max_in, bound=bound
        )

    # ------------------------------------------------------------------------- loopback
    def subscribe(self, topic: str, filter: Mapping[str, Any] | None, out: ChordOut) -> None:
        """Subscribe (spec §6): validate, ignore a repeated topic, add the conjunction to the
        loopback (Terpstra et al. §4.4)."""
        s = self.s
        if not isinstance(topic, str) or topic.startswith("$"):
            out.append(TraceRecord("chord.bad_filter", {"topic": str(topic), "error": "topic"}))
            return
        if topic in s.subs or s.phase in (LEAVING, LEFT):
            return
        try:
            conj = with_topic(validate(filter or {}), topic)
        except (FilterError, TypeError, ValueError) as error:
            out.append(TraceRecord("chord.bad_filter", {"topic": topic, "error": str(error)}))
            return
        s.subs[topic] = conj
        self.loop_changed(out)

    def loop_changed(self, out: ChordOut) -> None:
        s = self.s
        loop = self._reduce([*s.subs.values(), *s.maintenance], bound=False)
        if loop != self.loop:
            self.loop = loop
            self._push_all(out)

    # -------------------------------------------------------------------- clipped ends
    def _wanted(self) -> set[int]:
        """Every range end some in-neighbour asks this node's filter for."""
        ends = set(self.s.in_ends.values())
        for clips in self.in_clips.values():
            ends.update(clips)
        return ends

    def clips_for(self, v: NodeId) -> tuple[int, ...]:
        """The ends of wanted ranges that fall strictly inside r_u(v): there u needs v's
        filter for [key(v), e) only ("Clipped filters" in the module doc)."""
        start = self.s.key_of(v)
        size = dist(start, self.s.ends[v]) or SIZE
        offset = self.s.d(v)
        return tuple(
            sorted(
                e
                for e in self._wanted()
                if 0 < dist(start, e) < size and offset < (dist(self.s.key, e) or SIZE)
            )
        )

    def update_clips(self, out: ChordOut) -> None:
        """Ask each out-neighbour for the clipped filters the wanted ends now need."""
        s = self.s
        for v in s.edges:
            clips = self.clips_for(v)
            if clips != self.asked.get(v, ()):
                self.send_resp(v, s.ends[v], out)

    # ----------------------------------------------------------------------------- h
    def below(self, e: int) -> list[tuple[NodeId, int]]:
        """The edges x inside a range [key(u), e), each with the end up to which its filter
        is needed: e where e falls inside r_u(x) (a clipped filter), else r_u(x)'s own end
        (module doc, "Clipped filters")."""
        s = self.s
        ends = s.ends
        size = dist(self.s.key, e) or SIZE
        found = []
        for x in s.edges:
            if s.d(x) >= size:
                break
            start = s.key_of(x)
            inside = dist(start, e) < (dist(start, ends[x]) or SIZE)
            found.append((x, e if inside else ends[x]))
        return found

    def _h(self, e: int, cache: dict[int, Disjunction]) -> Disjunction:
        """h for an in-neighbour's range [key(v), e) (Terpstra et al. §4.4): the loopback and, for
        every settled edge x with d(v,x) < d(v,e), the filter of x for the part of r_v(x)
        inside the range (module doc, "Clipped filters")."""
        h = cache.get(e)
        if h is None:
            pending = self.pending
            h = cache[e] = self.union(
                e, lambda x, needed: () if x in pending else self.s.edge_filter(x, needed)
            )
        return h

    def union(self, e: int, filter_of: Callable[[NodeId, int], Disjunction]) -> Disjunction:
        """reduce(loopback ∪ filter_of(x, needed) for (x, needed) in below(e)): h for the
        range [key(u), e) given each edge's filter for the part of its range inside it (the
        protocol's current filters, or the warm start's fixpoint ones). With ``merging`` the
        reductions share their prefixes (:class:`~pubmesh.proto.chord.routing.PrefixChain`)."""
        below = self.below(e)
        if self.s.params.routing != "merging":
            parts = list(self.loop)
            for x, needed in below:
                parts.extend(filter_of(x, needed))
            return self._reduce(parts, bound=True)
        ends = self.s.ends
        head = [self.loop]
        last: Disjunction = ()
        for x, needed in below:
            if needed == ends[x]:
                head.append(filter_of(x, needed))
            else:
                last = filter_of(x, needed)  # clipped: only the last edge can be
        return self.chain.reduce(head, last)

    # -------------------------------------------------------------------------- push
    def _push_all(self, out: ChordOut, *, beyond: int = -1) -> None:
        """Send every wanted filter that changed; with ``beyond``, only those whose range
        reaches past that distance (the others cannot have changed)."""
        cache: dict[int, Disjunction] = {}
        for u in sorted(self.s.in_ends):
            for e in (self.s.in_ends[u], *self.in_clips.get(u, ())):
                if (dist(self.s.key, e) or SIZE) > beyond:
                    self._push(u, e, cache, out)

    def _push(
        self,
        u: NodeId,
        e: int | None,
        cache: dict[int, Disjunction],
        out: ChordOut,
        *,
        ack: bool = False,
    ) -> None:
        h: Disjunction = () if e is None else self._h(e, cache)
        if not ack and self.sent.get((u, e if e is not None else -1)) == h:
            return
        seq = self.fu_seq.get(u, 0) + 1
        self.fu_seq[u] = seq
        seen = self.rc_seen.get(u)
        message = FilterUpdate(
            epoch=self.s.epoch,
            seq=seq,
            range_seq=seen[1] if seen else 0,
            end=e if e is not None else -1,
            filter=texts(h),
        )
        if e is not None:
            self.sent[(u, e)] = h
            self.sent_msg[(u, e)] = message
        out.append(Send(u, message))

    def unacked_gone(self, u: NodeId) -> None:
        """``u`` cannot acknowledge our RespChange any more (it failed, or the edge change
        that told it its edge is gone)."""
        self.rc_unacked.pop(u, None)

    def forget_in(self, u: NodeId) -> None:
        """``u`` is no in-neighbour any more: its range end, clipped ends and the filters we
        sent it go."""
        self.s.in_ends.pop(u, None)
        self.in_clips.pop(u, None)
        for pair in [pair for pair in self.sent if pair[0] == u]:
            del self.sent[pair]
            self.sent_msg.pop(pair, None)

    # ------------------------------------------------------------------- edge changes
    def carve(self, old_edges: list[NodeId], old_ends: dict[NodeId, int], out: ChordOut) -> None:
        """The filters of an edge change (spec §7, Terpstra et al. §5.2), once the ring holds the
        new edges and ranges (its :class:`~.shared.EdgesChanged`): filters carved from the
        old ones, RespChange to every peer whose range changed.

        f_new(u→v) is f_old(u→v) if v's range only shrank; else the union of the old filters
        whose ranges meet the new one (delegation of a lost peer's range, §8.2), or match-all
        and *pending* if the new range meets u's old loopback range (a carve with w = u)."""
        key_of = self.s.key_of
        edges, ends = self.s.edges, self.s.ends
        old_out = self.s.edge_filters
        old_first = key_of(old_edges[0]) if old_edges else self.s.key
        old_loop = dist(self.s.key, old_first) or SIZE
        new_out: dict[NodeId, Disjunction] = {}
        pending: set[NodeId] = set()
        for v in edges:
            start = key_of(v)
            size = dist(start, ends[v]) or SIZE
            if v in old_out and size <= (dist(start, old_ends[v]) or SIZE):
                new_out[v] = old_out[v]
                if v in self.pending:
                    pending.add(v)
                continue
            if _arcs_meet(self.s.key, old_loop, start, size):
                new_out[v] = MATCH_ALL
                pending.add(v)
                continue
            parts: list[Conjunction] = []
            for y in old_edges:
                y_start = key_of(y)
                if _arcs_meet(y_start, dist(y_start, old_ends[y]) or SIZE, start, size):
                    parts.extend(old_out[y])
                    if y in self.pending:
                        pending.add(v)
            new_out[v] = self._reduce(parts, bound=True)
        self.s.edge_filters, self.pending = new_out, pending
        for v in [v for v in self.s.clipped if old_ends.get(v) != ends.get(v)]:
            del self.s.clipped[v]
        for v in [v for v in self.asked if v not in ends]:
            del self.asked[v]
        for v in edges:
            if old_ends.get(v) != ends[v] or self.clips_for(v) != self.asked.get(v, ()):
                self.send_resp(v, ends[v], out)
        for y in old_edges:
            if y not in ends:
                self.send_resp(y, None, out)
        self._push_all(out)

    def send_resp(self, v: NodeId, end: int | None, out: ChordOut) -> None:
        seq = self.rc_seq.get(v, 0) + 1
        self.rc_seq[v] = seq
        clips = self.clips_for(v) if end is not None else ()
        if clips:
            self.asked[v] = clips
        else:
            self.asked.pop(v, None)
        kept = {e: f for e, f in self.s.clipped.get(v, {}).items() if e in clips}
        if kept:
            self.s.clipped[v] = kept
        else:
            self.s.clipped.pop(v, None)
        message = RespChange(epoch=self.s.epoch, seq=seq, end=end, clips=clips)
        self.rc_unacked[v] = message
        out.append(Send(v, message))
        out.append(SetTimer(self.s.params.resp_retry, RespRetry(self.s.life, v, seq)))

    # -------------------------------------------------------------------------- receive
    def on_resp_change(self, src: NodeId, message: RespChange, out: ChordOut) -> None:
        """RespChange (spec §7): store the range end (u joins s(v), or leaves on None) and the
        clipped ends, and always answer with FilterUpdates, the acknowledgement."""
        if self.s.phase != JOINED:
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
        pred_before = self.s.pred()
        self.forget_in(src)
        cache: dict[int, Disjunction] = {}
        if end is None:
            self._push(src, None, cache, out, ack=True)
        else:
            self.s.in_ends[src] = end
            self.in_clips[src] = tuple(sorted({e for e in clips if e != end}))
            for e in (end, *self.in_clips[src]):
                self._push(src, e, cache, out, ack=True)
        self.update_clips(out)
        if self.s.pred() != pred_before:
            out.route(OwnRangeChanged())

    def _valid_end(self, e: object) -> bool:
        return isinstance(e, int) and not isinstance(e, bool) and 0 <= e < SIZE and e != self.s.key

    def on_filter_update(self, src: NodeId, message: FilterUpdate, out: ChordOut) -> None:
        """FilterUpdate (spec §6): acknowledge our RespChange, refuse stale or foreign
        updates, replace f(v→w) (or one of its clipped filters), and pass the change on to
        every in-neighbour whose range reaches w."""
        s = self.s
        if s.phase != JOINED:
            return
        epoch, seq, e = message.epoch, message.seq, message.end
        if not isinstance(epoch, int) or not isinstance(seq, int) or not isinstance(e, int):
            return
        pending = self.rc_unacked.get(src)
        acked = isinstance(message.range_seq, int) and pending is not None
        if acked and pending is not None and message.range_seq >= pending.seq:
            del self.rc_unacked[src]
        if src not in self.s.edge_filters:
            return
        full = e == s.ends[src]
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
            if not was_pending and g == self.s.edge_filters[src]:
                return
            lazy = s.params.lazy_shrink and disjunction_covers(self.s.edge_filters[src], g)
            if not was_pending and lazy:
                return  # Terpstra et al. §4.4 "may choose not to update" (off by default, spec §6)
            self.s.edge_filters[src] = g
        else:
            clipped = self.s.clipped.setdefault(src, {})
            if clipped.get(e) == g:
                return
            clipped[e] = g
        self._push_all(out, beyond=s.d(src))

    # --------------------------------------------------------------------------- timers
    def fire(self, timer: Timer, out: ChordOut) -> None:
        """RespChange retries and the periodic filter refresh (spec §7, §8.4)."""
        p = self.s.params
        match timer:
            case RespRetry(peer=peer, seq=seq):
                pending = self.rc_unacked.get(peer)
                if pending is not None and pending.seq == seq:
                    out.append(Send(peer, pending))
                    out.append(SetTimer(p.resp_retry, timer))
            case RefreshTick():
                for peer, e in sorted(self.sent_msg):
                    out.append(Send(peer, self.sent_msg[(peer, e)]))
                out.append(SetTimer(p.filter_refresh, timer))
