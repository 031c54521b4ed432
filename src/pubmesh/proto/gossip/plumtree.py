"""Plumtree: epidemic broadcast trees over one topic swarm's HyParView active view.

Source: Leitão, Pereira, Rodrigues, *Epidemic Broadcast Trees* (SRDS 2007), §3 (Algorithm 1
and 2) and §3.8 (optimization); docs/protocols/gossip.md; timer handling after the course
report's fixes (Henriques & Pamplona §3.4).

How it works
============
Every member splits its active view into **eager push peers**, which get the full message
(GOSSIP) as soon as it arrives, and **lazy push peers**, which only get an announcement
(IHAVE). Initially every neighbour is eager, so the first broadcast floods; every duplicate
a node receives tells it that the link it came on is redundant, and it PRUNEs it (the link
becomes lazy on both ends). What is left eager is a spanning tree; the lazy links are its
repair kit: a node that hears IHAVE for a message it has not received starts a timer, and if
the tree has not delivered by then it GRAFTs the announcer (the link becomes eager again and
the announcer sends the message). RMR (payload messages ÷ (receivers − 1) − 1) goes to 0 once
the tree has formed; reliability stays that of flooding.

Rules, as in the spec (each handler quotes the one it implements):

* Broadcast(m): deliver, mark received, GOSSIP(m, id, round 0) to eager peers, IHAVE(id, 0)
  to lazy peers.
* GOSSIP(m, id, round) from s, first time: deliver, mark, cancel id's timer, forward GOSSIP
  with round+1 to eager peers except s, IHAVE to lazy peers except s, make s eager, run the
  optimization. Duplicate: make s lazy and send PRUNE to s.
* PRUNE from s: s becomes lazy. IHAVE(id, round) from s, id not received: record the
  announcement; start timer(id, timeout1) if none runs.
* Timer(id) fires: start timer(id, timeout2); take the first announcement for id; make its
  sender eager and send it GRAFT(id, round).
* GRAFT(id, round) from s: s becomes eager; if id was received, send it GOSSIP(m, id, round).
* NeighborDown(q): drop q from both sets and its announcements. NeighborUp(q): q becomes eager.
* Optimization (§3.8): when an announcement's round is lower than the round the GOSSIP came
  with by at least ``threshold``, graft the announcer (without asking for the message) and
  prune the GOSSIP's sender. Checked both for announcements that arrived before the message
  and for those that arrive after it (the paper's Algorithm checks on IHAVE receipt).

Rounds count hops: the publisher sends round 0, and a node that receives GOSSIP with round r
delivers at hop r + 1 and forwards round r + 1. ``flood = true`` turns the tree off (every
neighbour eager, no prune, no IHAVE): the baseline Plumtree is measured against.

The rule that keeps it correct
==============================
A node's ``eager`` and ``lazy`` lists are disjoint and together are exactly its active view in
the swarm: NeighborUp makes a peer eager, NeighborDown drops it from both, and PRUNE, GRAFT and
the optimization only move a neighbour from one list to the other (a GOSSIP from outside the
active view is delivered if new, and its sender dropped again: :mod:`pubmesh.proto.gossip.node`).
Every message a node broadcasts or receives for the first time goes at once to every neighbour
but the one it came from: GOSSIP to the eager ones, IHAVE to the lazy ones (batched, the IHAVE
still goes to every peer that was lazy at the push, even one turned eager since). So a PRUNE
never cuts a neighbour off a message, it only trades the payload for an announcement: a node the
tree fails to reach hears IHAVE from every neighbour that has the message, and its graft timer
asks those announcers one by one (``timeout1``, then ``timeout2`` each) until the message comes,
sent by any of them that still caches the payload (``payload_retention``). While the active view
is connected, every member therefore receives every message, as flooding would (within the
bounds below); the tree only decides which links carry the payload first.

Timers, bounds and the cache
============================
Timers are typed values: ``SendGraft(pub_id, generation)`` (timeout1, then timeout2 per further
announcer), ``FlushIHave()`` (IHAVE batching, one per node) and ``EvictCache()``. A graft timer
for a message that has since arrived, or a superseded one, is ignored by its generation (the
report's §3.4 problem with timers inside timers cannot happen); a timer of an earlier instance
of the topic never reaches this one, because the gossip node wraps every timer with the
instance's epoch (:class:`pubmesh.proto.gossip.node.SwarmTimer`).

Bounds. The paper trusts its members; a member that announces ids that never come (an
insider's IHAVE flood: without the bounds, 3 MB of invented ids grew a node by 159 MB for 90 s
and made it send ~75,000 GRAFTs) must not cost the others without limit. So each neighbour may
hold at most ``max_announced`` announcements of messages not received yet (IHAVEs beyond it are
ignored and counted as ``ihave_over_limit``), an announcement is settled when the message
comes, when its GRAFT goes out, when its announcer goes down or when the id is evicted, and an
id whose every announcer has been asked in vain is given up at once instead of at
``id_retention``. Each invented id therefore costs one GRAFT to the liar and is forgotten
within ``timeout1`` plus one ``timeout2`` per announcer.

The message cache has a retention (iroh-gossip ``plumtree.rs``: ``message_cache_retention`` and
``message_id_retention``, evicted on a timer): a payload is kept ``payload_retention`` seconds
after it was first seen, to answer GRAFTs; the id (and any announcements of a message that never
came) ``id_retention`` seconds, to recognise duplicates. A long-running node therefore holds
state for the last ``id_retention`` seconds of traffic, not for its whole life. One
``EvictCache`` timer runs while the cache is non-empty, set for the earliest expiry and
evicting everything due within ``evict_slack`` of it, so a busy swarm costs one timer per
``evict_slack`` seconds, not one per message. The payloads are bounded in bytes too
(``cache_bytes`` per node, over all its swarms: :class:`CacheBudget`; not in the paper): past
it the adding swarm's oldest go first, then the other swarms' oldest, before their retention
(so the node's caches hold at most ``cache_bytes`` plus the payload just added), so an insider
publishing fast, on one topic or many, cannot grow the caches without limit; and a neighbour's
GRAFT requests for ids the node does not hold are answered (by making the link eager) at most
``max_unknown_grafts`` a second, the rest ignored; the network runtime counts what the caches
hold (:meth:`Plumtree.held_bytes`) in the node's memory budget.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from pubmesh.proto.core import (
    Message,
    NodeId,
    Output,
    PubId,
    Receive,
    Send,
    SetTimer,
    Timer,
    TimerFired,
    register_message,
)
from pubmesh.proto.gossip.hyparview import NeighborDown, NeighborUp
from pubmesh.proto.gossip.params import GossipParams
from pubmesh.proto.gossip.rooted import Beacon, BeaconTick, RootedTree, RoundDue, RoundRequest


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class Gossip(Message):
    topic: str
    pub_id: int
    round: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


register_message(Gossip, 120, layer="broadcast", payload=True)


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class IHave(Message):
    """Announcements (id, round); one, or a batch when ``ihave_batch_interval`` > 0."""

    topic: str
    announcements: "tuple[tuple[int, int], ...]"  # noqa: UP037 (quoted, see Shuffle.nodes)

    def publication(self) -> int | None:
        return self.announcements[0][0] if len(self.announcements) == 1 else None


register_message(IHave, 121, layer="broadcast")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class Graft(Message):
    """Make me eager again; ``request``: and send me message ``pub_id`` (False for the
    optimization's graft, which only repairs the tree)."""

    topic: str
    pub_id: int
    round: int
    request: bool

    def publication(self) -> int | None:
        return self.pub_id if self.request else None


register_message(Graft, 122, layer="broadcast")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class Prune(Message):
    topic: str


register_message(Prune, 123, layer="broadcast")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Delivered:
    """Plumtree's deliver event for the stack (which decides whether the app sees it)."""

    pub_id: PubId
    payload: bytes
    hops: int


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Broadcast:
    """The node's command: broadcast ``payload`` as publication ``pub_id`` (Algorithm 1)."""

    pub_id: PubId
    payload: bytes


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class SendGraft(Timer):
    """timeout1 after the first IHAVE for ``pub_id`` (timeout2 after each further GRAFT)."""

    pub_id: PubId
    generation: int


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class FlushIHave(Timer):
    """Send every lazy peer the announcements batched for it. One timer per node, not one
    per peer: per-peer timers, started whenever a peer's queue fills, would wake a node
    process up to once per lazy peer and interval, and a wake-up of a node process costs far
    more than the frame it handles. When and how the lazy queue is emptied is the lazy push
    policy, which Henriques & Pamplona leaves unused ("IHave messages immediately after they are
    created") and docs/protocols/gossip.md leaves open ("IHAVE may be batched")."""


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class EvictCache(Timer):
    """Drop payloads and ids older than their retention."""


BroadcastTimer = SendGraft | FlushIHave | EvictCache | BeaconTick | RoundDue
BroadcastInput = Receive | TimerFired | NeighborUp | NeighborDown | Broadcast
BroadcastOutput = Output | Delivered


class CacheBudget:
    """The payload bytes all of a node's swarms cache, and the most they may (``cache_bytes``):
    shared by the node's Plumtree instances once it has more than one swarm. It names none of
    them (no reference cycle): the node shrinks the other swarms' caches when one swarm's own
    could not bring the total under ``limit`` (:meth:`Plumtree.shrink_cache`)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def join(self, member: Plumtree) -> None:
        member.budget = self
        self.used += member.payload_bytes

    def leave(self, member: Plumtree) -> None:
        self.used -= member.payload_bytes
        member.budget = None


class Plumtree:
    """The broadcast state machine of one node in one topic swarm."""

    __slots__ = (
        "_evict_pending",
        "_payload_seen",
        "_seen",
        "announced",
        "budget",
        "cache_evicted_early",
        "counters",
        "eager",
        "first_from",
        "graft_generation",
        "graft_over_limit",
        "graft_window",
        "ihave_over_limit",
        "lazy",
        "lazy_queue",
        "me",
        "missing",
        "p",
        "payload_bytes",
        "payloads",
        "received",
        "rt",
        "temp",
        "topic",
    )

    def __init__(self, me: NodeId, topic: str, params: GossipParams) -> None:
        self.me = me
        self.topic = topic
        self.p = params
        #: eager and lazy push peers, each a sorted list (at most active_size ids: a list is a
        #: fifth of a set's memory, and sorted is the order sends go out in)
        self.eager: list[NodeId] = []
        self.lazy: list[NodeId] = []
        #: ids of received messages: id -> (round received at, who sent it first)
        self.received: dict[PubId, tuple[int, NodeId]] = {}
        #: payloads of received messages still within payload_retention, to answer GRAFTs
        self.payloads: dict[PubId, bytes] = {}
        #: their bytes, and how many left before payload_retention; ``budget``: the node's
        #: shared count when it has several swarms (None: this swarm's bytes are the node's)
        self.payload_bytes = 0
        self.budget: CacheBudget | None = None
        self.cache_evicted_early = 0
        #: announcements of messages not received yet: id -> [(announcer, round)]
        self.missing: dict[PubId, list[tuple[NodeId, int]]] = {}
        #: how many of those each neighbour made (bounded by max_announced), and how many
        #: announcements were ignored past that bound
        self.announced: dict[NodeId, int] = {}
        self.ihave_over_limit = 0
        #: per neighbour: when its current second of GRAFT requests for ids not held began,
        #: and how many came in it (max_unknown_grafts); requests ignored past the bound
        self.graft_window: dict[NodeId, tuple[float, int]] = {}
        self.graft_over_limit = 0
        #: the generation of the graft timer running for an id
        self.graft_generation: dict[PubId, int] = {}
        #: batched announcements per lazy peer (non-empty: a FlushIHave is pending)
        self.lazy_queue: dict[NodeId, list[tuple[int, int]]] = {}
        #: (first seen, id) in the order ids were first seen, for eviction; created on first
        #: use and dropped when emptied, so an idle node keeps neither. Lists, not deques: a
        #: deque starts with a 64-entry block (624 bytes), paid twice by every node a broadcast
        #: reaches (1.2 GiB at 10^6 nodes), where these hold a few entries and eviction takes
        #: a prefix at once
        self._seen: list[tuple[float, PubId]] | None = None
        self._payload_seen: list[tuple[float, PubId]] | None = None
        self._evict_pending = False
        self.counters: dict[str, int] = {}
        #: with prune_guard: peer -> when it last brought the first copy of a message
        self.first_from: dict[NodeId, float] | None = None
        #: tree = "rooted" (pubmesh.proto.gossip.rooted): the tree's state, and the
        #: temporary eager links with when each goes lazy
        self.rt: RootedTree | None = None
        self.temp: dict[NodeId, float] = {}
        if params.tree == "rooted" and not params.flood:
            self.rt = RootedTree(me, topic, params.beacon_interval, params.root_timeout)

    # ------------------------------------------------------------------ the one entry point
    def handle(self, event: BroadcastInput, now: float) -> list[BroadcastOutput]:
        """Plumtree's handler: a broadcast-layer message, one of its timers, a neighbour event
        from HyParView, or the node's Broadcast command in; sends, timers, deliveries out."""
        out: list[BroadcastOutput] = []
        if self.rt is not None and not self.rt.ticking:
            self.rt.start(now, out)  # a warm-started node's first event
        match event:
            case Receive(src=src, message=msg):
                self._receive(src, msg, now, out)
            case NeighborUp(peer=peer):
                self._neighbor_up(peer, now)
                if self.rt is not None:
                    out.append(Send(peer, self.rt.beacon()))
            case NeighborDown(peer=peer):
                self._neighbor_down(peer)
                if self.rt is not None:
                    self.temp.pop(peer, None)
                    self.rt.neighbor_down(peer)
                    self._sync_tree(now, out)
            case Broadcast(pub_id=pub_id, payload=payload):
                self._broadcast(pub_id, payload, now, out)
            case TimerFired(timer=timer):
                self._fire(timer, now, out)
        return out

    def fire(self, timer: Timer, now: float) -> list[BroadcastOutput]:
        """``handle(TimerFired(timer), now)`` without the wrapper: the simulator's hot path."""
        out: list[BroadcastOutput] = []
        if self.rt is not None and not self.rt.ticking:
            self.rt.start(now, out)  # a warm-started node's first event
        self._fire(timer, now, out)
        return out

    def _fire(self, timer: Timer, now: float, out: list[BroadcastOutput]) -> None:
        match timer:
            case SendGraft(pub_id=pub_id, generation=generation):
                self._graft_timeout(pub_id, generation, now, out)
            case FlushIHave():
                # Algorithm 1's lazyQueue: an announcement goes to the peers that were lazy
                # when the message was pushed, whatever they are now. One turned eager since
                # (its GRAFT of another message, its first copy of one) got this message from
                # nobody here, and without the IHAVE it would not know to graft it; a peer
                # gone from the view took its queue with it (NeighborDown)
                queues, self.lazy_queue = self.lazy_queue, {}
                for peer, queue in queues.items():  # a queue exists only with an entry
                    ihave = IHave(topic=self.topic, announcements=tuple(queue))
                    out.append(Send(peer, ihave))
            case EvictCache():
                self._evict(now, out)
            case BeaconTick() if self.rt is not None:
                self.rt.tick(now, out)
                self._sync_tree(now, out)
            case RoundDue() if self.rt is not None:
                self.rt.round_due_fired(now)
                self._sync_tree(now, out)

    # ------------------------------------------------------------------ the rooted tree
    def _sync_tree(self, now: float, out: list[BroadcastOutput]) -> None:
        """Eager = the tree's links and the live temporary ones; the rest of the active view
        lazy. Then tell the neighbours our place in the tree if it changed."""
        rt = self.rt
        assert rt is not None
        for peer in [p for p, until in self.temp.items() if until <= now]:
            del self.temp[peer]
        tree = rt.tree_links()
        active = sorted({*self.eager, *self.lazy})
        for peer in active:
            eager = peer in tree or peer in self.temp
            if eager and peer in self.lazy:
                _discard(self.lazy, peer)
                _add(self.eager, peer)
            elif not eager and peer in self.eager:
                _discard(self.eager, peer)
                _add(self.lazy, peer)
        rt.flush(active, out)

    # ------------------------------------------------------------------ neighbours
    def _neighbor_up(self, peer: NodeId, now: float) -> None:
        """NeighborUp(q): q becomes eager. With tree = "rooted", outside the tree only for
        temp_ttl: a new neighbour's link, a graft's, one that brought a first copy."""
        rt = self.rt
        if rt is not None and not rt.is_tree_link(peer):
            self.temp[peer] = now + self.p.temp_ttl
        _add(self.eager, peer)
        _discard(self.lazy, peer)

    def _unknown_graft_allowed(self, peer: NodeId, now: float) -> bool:
        """Count a GRAFT request from ``peer`` for an id not held: within
        ``max_unknown_grafts`` in the current second of its window?"""
        window = self.graft_window.get(peer)
        if window is None or now - window[0] >= 1.0:
            self.graft_window[peer] = (now, 1)
            return True
        count = window[1] + 1
        self.graft_window[peer] = (window[0], count)
        return count <= self.p.max_unknown_grafts

    def _neighbor_down(self, peer: NodeId) -> None:
        """NeighborDown(q): drop q from both sets and its announcements."""
        self.graft_window.pop(peer, None)
        _discard(self.eager, peer)
        _discard(self.lazy, peer)
        self.lazy_queue.pop(peer, None)
        if self.first_from is not None:
            self.first_from.pop(peer, None)
        if self.announced.pop(peer, 0):
            for pub_id in list(self.missing):
                self.missing[pub_id] = [a for a in self.missing[pub_id] if a[0] != peer]

    def _settled(self, announcements: Iterable[tuple[NodeId, int]]) -> None:
        """These announcements are no longer held: their announcers may make new ones."""
        announced = self.announced
        for announcer, _ in announcements:
            left = announced.get(announcer, 0) - 1
            if left > 0:
                announced[announcer] = left
            else:
                announced.pop(announcer, None)

    # ------------------------------------------------------------------ broadcast
    def _broadcast(
        self, pub_id: PubId, payload: bytes, now: float, out: list[BroadcastOutput]
    ) -> None:
        """Broadcast(m): deliver, mark received, GOSSIP(round 0) to eager, IHAVE to lazy."""
        if pub_id in self.received:
            return
        self._mark_received(pub_id, payload, 0, self.me, now, out)
        out.append(Delivered(pub_id, payload, 0))
        self._push(pub_id, 0, payload, exclude=-1, out=out)

    def _push(
        self, pub_id: PubId, rnd: int, payload: bytes, exclude: NodeId, out: list[BroadcastOutput]
    ) -> None:
        # messages are immutable: one object serves every peer, built only if some peer gets
        # it (a leaf of the tree forwards to no one; with batching no IHAVE is built here)
        gossip: Gossip | None = None
        for peer in self.eager:
            if peer != exclude:
                if gossip is None:
                    gossip = Gossip(topic=self.topic, pub_id=pub_id, round=rnd, payload=payload)
                out.append(Send(peer, gossip))
        if self.p.flood or not self.lazy:
            return
        announcement: IHave | None = None
        batch = self.p.ihave_batch_interval
        queues = self.lazy_queue
        for peer in self.lazy:
            if peer == exclude:
                continue
            if batch > 0:
                if not queues:  # the first announcement of a batch: one flush for every peer
                    out.append(SetTimer(batch, FlushIHave()))
                queue = queues.get(peer)
                if queue is None:
                    queue = queues[peer] = []
                queue.append((pub_id, rnd))
            else:
                if announcement is None:
                    announcement = IHave(topic=self.topic, announcements=((pub_id, rnd),))
                out.append(Send(peer, announcement))

    def receive(self, src: NodeId, msg: Message, now: float) -> list[BroadcastOutput]:
        """``handle(Receive(src, msg), now)`` without the wrapper: the simulator's hot path."""
        out: list[BroadcastOutput] = []
        if self.rt is not None and not self.rt.ticking:
            self.rt.start(now, out)  # a warm-started node's first event
        self._receive(src, msg, now, out)
        return out

    # ------------------------------------------------------------------ messages
    def _receive(self, src: NodeId, msg: Message, now: float, out: list[BroadcastOutput]) -> None:
        name = type(msg).__name__
        counters = self.counters
        counters[name] = counters.get(name, 0) + 1
        # exact-type tests for the two messages of every broadcast, before the general match
        if type(msg) is Gossip:
            self._on_gossip(src, msg, now, out)
            return
        if type(msg) is IHave:
            self._on_ihave(src, msg.announcements, now, out)
            return
        match msg:
            case Beacon() if self.rt is not None:
                self.rt.on_beacon(src, msg, now)
                self._sync_tree(now, out)
            case RoundRequest() if self.rt is not None:
                self.rt.on_request(src, msg, now, out)
                self._sync_tree(now, out)
            case Graft(pub_id=pub_id, round=rnd, request=request):
                # "GRAFT(id, round) from s: s becomes eager; if id was received, send it
                # GOSSIP(m, id, round)." (Not once its payload has left the cache, and a
                # neighbour's requests for ids not held are bounded: module docstring.)
                payload = self.payloads.get(pub_id)
                if request and payload is None and not self._unknown_graft_allowed(src, now):
                    self.graft_over_limit += 1
                    return
                self._neighbor_up(src, now)
                if request and payload is not None:
                    out.append(
                        Send(
                            src, Gossip(topic=self.topic, pub_id=pub_id, round=rnd, payload=payload)
                        )
                    )
            case Prune():
                # "PRUNE from s: s becomes lazy." (tree = "rooted": not a tree link, which
                # the beacons decide)
                if self.rt is not None:
                    if self.rt.is_tree_link(src):
                        return
                    self.temp.pop(src, None)
                if src in self.eager:
                    self.eager.remove(src)
                    _add(self.lazy, src)

    def _on_gossip(self, src: NodeId, msg: Gossip, now: float, out: list[BroadcastOutput]) -> None:
        pub_id, rnd = msg.pub_id, msg.round + 1
        guard = self.p.prune_guard
        if pub_id in self.received:
            # "Duplicate: make s lazy and send PRUNE to s." With prune_guard, not if s brought
            # the first copy of another message within the guard (experimental).
            if not self.p.flood:
                if self.rt is not None:
                    if self.rt.is_tree_link(src):
                        return  # a tree link: the beacons decide it, not a duplicate
                    self.temp.pop(src, None)
                first = self.first_from.get(src) if self.first_from is not None else None
                if first is not None and now - first < guard:
                    return
                self._make_lazy(src)
                out.append(Send(src, Prune(topic=self.topic)))
            return
        if guard:
            if self.first_from is None:
                self.first_from = {}
            self.first_from[src] = now
        # "first time: deliver, mark, cancel id's timer, forward GOSSIP with round+1 to eager
        # peers except s, IHAVE to lazy peers except s, make s eager, run the optimization."
        self._mark_received(pub_id, msg.payload, rnd, src, now, out)
        out.append(Delivered(pub_id, msg.payload, rnd))
        self.graft_generation.pop(pub_id, None)
        announcements = self.missing.pop(pub_id, [])
        self._settled(announcements)
        self._push(pub_id, rnd, msg.payload, exclude=src, out=out)
        if self.p.flood:
            return
        self._neighbor_up(src, now)
        if self.rt is not None:
            return  # no §3.8 optimization: the tree is breadth-first already
        if self.p.optimization and announcements:
            announcer, best = min(announcements, key=lambda a: (a[1], a[0]))
            self._optimize(pub_id, announcer, best, now, out)

    def _on_ihave(
        self,
        src: NodeId,
        announcements: tuple[tuple[int, int], ...],
        now: float,
        out: list[BroadcastOutput],
    ) -> None:
        for pub_id, rnd in announcements:
            if pub_id in self.received:
                if self.p.optimization and self.rt is None:  # rooted: no §3.8 (see _on_gossip)
                    self._optimize(pub_id, src, rnd, now, out)
                continue
            # "record the announcement; start timer(id, timeout1) if none runs."
            held = self.announced.get(src, 0)
            if held >= self.p.max_announced:
                # an insider announcing ids that never come: its announcements stop costing
                # memory and grafts here (module docstring, bounds)
                self.ihave_over_limit += 1
                continue
            entries = self.missing.get(pub_id)
            if entries is None:
                entries = self.missing[pub_id] = []
                self._note_seen(pub_id, now, out)
            entries.append((src, rnd))
            self.announced[src] = held + 1
            if pub_id not in self.graft_generation:
                self.graft_generation[pub_id] = 1
                out.append(SetTimer(self.p.ihave_timeout1, SendGraft(pub_id, 1)))

    def _optimize(
        self,
        pub_id: PubId,
        announcer: NodeId,
        announced_round: int,
        now: float,
        out: list[BroadcastOutput],
    ) -> None:
        """§3.8: the announcer would have delivered at hop announced_round + 1; if that beats
        the tree by ``threshold`` hops or more, graft the announcer and prune the parent."""
        received_round, parent = self.received[pub_id]
        if (
            received_round - (announced_round + 1) < self.p.optimization_threshold
            or announcer == parent
            or parent == self.me
            or announcer not in self.lazy
        ):
            return
        self._neighbor_up(announcer, now)
        out.append(
            Send(
                announcer,
                Graft(topic=self.topic, pub_id=pub_id, round=announced_round, request=False),
            )
        )
        self._make_lazy(parent)
        out.append(Send(parent, Prune(topic=self.topic)))
        self.received[pub_id] = (announced_round + 1, announcer)

    def _make_lazy(self, peer: NodeId) -> None:
        if peer in self.eager or peer in self.lazy:
            _discard(self.eager, peer)
            _add(self.lazy, peer)

    # ------------------------------------------------------------------ timers
    def _graft_timeout(
        self, pub_id: PubId, generation: int, now: float, out: list[BroadcastOutput]
    ) -> None:
        if self.graft_generation.get(pub_id) != generation or pub_id in self.received:
            return
        entries = self.missing.get(pub_id)
        if not entries:
            # every announcer was asked and none sent it: the id is given up (a later IHAVE
            # starts over), and what it held goes now rather than at id_retention
            self.graft_generation.pop(pub_id, None)
            self.missing.pop(pub_id, None)
            return
        # "Timer(id) fires: start timer(id, timeout2); take the first announcement for id;
        # make its sender eager and send it GRAFT(id, round)."
        announcer, rnd = entries.pop(0)
        self._settled(((announcer, rnd),))
        self.graft_generation[pub_id] = generation + 1
        out.append(SetTimer(self.p.ihave_timeout2, SendGraft(pub_id, generation + 1)))
        self._neighbor_up(announcer, now)
        out.append(Send(announcer, Graft(topic=self.topic, pub_id=pub_id, round=rnd, request=True)))

    # ------------------------------------------------------------------ the cache
    def _mark_received(
        self,
        pub_id: PubId,
        payload: bytes,
        rnd: int,
        parent: NodeId,
        now: float,
        out: list[BroadcastOutput],
        *,
        first: float | None = None,
    ) -> None:
        """``first``: when the publication was first had (a replayed one: by its sender),
        for the payload cache's age; now if not given."""
        if pub_id not in self.missing:
            self._note_seen(pub_id, now, out)
        self.received[pub_id] = (rnd, parent)
        payloads = self.payloads
        size = len(payload)
        old = payloads.get(pub_id)
        if old is not None:
            size -= len(old)
        payloads[pub_id] = payload
        if self._payload_seen is None:
            self._payload_seen = []
        self._payload_seen.append((now if first is None else first, pub_id))
        # the byte bound, inline (a call per received message is a forwarding node's cost)
        self.payload_bytes += size
        budget = self.budget
        if budget is not None:
            budget.used += size
            if budget.used > self.p.cache_bytes:
                self._shrink_cache(keep=1)
        elif self.payload_bytes > self.p.cache_bytes:
            self._shrink_cache(keep=1)

    def cached(self, count: int, seconds: float, now: float) -> list[tuple[PubId, bytes, float]]:
        """The cached publications a history query asks for (pubmesh.proto.history): (id,
        payload, age), oldest first; the newest ``count`` (0: all) of those first seen
        within ``seconds`` (0: any). The cache is Plumtree's, kept to answer GRAFTs."""
        seen = self._payload_seen or []
        found: list[tuple[PubId, bytes, float]] = []
        for first, pub_id in seen:
            if seconds and now - first > seconds:
                continue
            payload = self.payloads.get(pub_id)
            if payload is not None:
                found.append((pub_id, payload, now - first))
        return found[-count:] if count else found

    def replay(
        self,
        pub_id: PubId,
        payload: bytes,
        src: NodeId,
        now: float,
        out: list[BroadcastOutput],
        *,
        age: float = 0.0,
    ) -> bool:
        """A publication from the topic's history (pubmesh.proto.history): True, and it is
        received (cached, its id known, so a live copy is a duplicate) if it is new; False if
        the node has it already. It is not forwarded: the members have it. Cached as first
        seen ``age`` seconds ago (when its sender first had it), so this node's own answers
        date it as the sender did, not from the replay."""
        if pub_id in self.received:
            return False
        self._mark_received(pub_id, payload, 0, src, now, out, first=now - age)
        self.graft_generation.pop(pub_id, None)
        self._settled(self.missing.pop(pub_id, []))
        return True

    def shrink_cache(self) -> None:
        """Drop this swarm's oldest payloads while the node's caches are over the bound."""
        self._shrink_cache(keep=0)

    def _count(self, change: int) -> None:
        self.payload_bytes += change
        if self.budget is not None:
            self.budget.used += change

    def _cached(self) -> int:
        """Payload bytes the node's caches hold (all its swarms', once it has several)."""
        return self.budget.used if self.budget is not None else self.payload_bytes

    def _shrink_cache(self, keep: int) -> None:
        """This swarm's oldest payloads out until the node's caches hold seven eighths of
        ``cache_bytes`` (module docstring), keeping its ``keep`` newest whatever their size.
        Down to seven eighths, not to the bound: the list of first-seen times is cut once per
        eighth of the cache, not once per payload (a cut per payload cost a forwarding node
        half its throughput once the cache was full)."""
        seen = self._payload_seen
        if seen is None:
            return
        target = self.p.cache_bytes - self.p.cache_bytes // 8
        done = 0
        while self._cached() > target and done < len(seen) - keep:
            gone = self.payloads.pop(seen[done][1], None)
            if gone is not None:
                self._count(-len(gone))
                self.cache_evicted_early += 1
            done += 1
        del seen[:done]

    def held_bytes(self) -> int:
        """The payloads' bytes, and an estimate of the ids' state: ``ID_BYTES`` per id
        received or awaited (a dict entry, its tuple or list, and eviction's tuple)."""
        return self.payload_bytes + ID_BYTES * (len(self.received) + len(self.missing))

    def _note_seen(self, pub_id: PubId, now: float, out: list[BroadcastOutput]) -> None:
        """``pub_id`` is seen for the first time (received, or announced while missing)."""
        if self._seen is None:
            self._seen = []
        self._seen.append((now, pub_id))
        if not self._evict_pending:
            self._evict_pending = True
            out.append(SetTimer(self.p.payload_retention, EvictCache()))

    def _evict(self, now: float, out: list[BroadcastOutput]) -> None:
        """Drop payloads past ``payload_retention`` and ids (with their announcements and
        graft state) past ``id_retention``, and everything due within ``evict_slack``."""
        self._evict_pending = False
        payload_cut = now + self.p.evict_slack - self.p.payload_retention
        seen = self._payload_seen
        if seen:
            done = 0
            while done < len(seen) and seen[done][0] <= payload_cut:
                kept = self.payloads.pop(seen[done][1], None)
                if kept is not None:
                    self._count(-len(kept))
                done += 1
            del seen[:done]
        id_cut = now + self.p.evict_slack - self.p.id_retention
        seen = self._seen
        if seen:
            done = 0
            while done < len(seen) and seen[done][0] <= id_cut:
                pub_id = seen[done][1]
                self.received.pop(pub_id, None)
                gone = self.missing.pop(pub_id, None)
                if gone:
                    self._settled(gone)
                self.graft_generation.pop(pub_id, None)
                done += 1
            del seen[:done]
        if not self._payload_seen:
            self._payload_seen = None
        if not self._seen:
            self._seen = None
        due = [
            queue[0][0] + retention - now
            for queue, retention in (
                (self._payload_seen, self.p.payload_retention),
                (self._seen, self.p.id_retention),
            )
            if queue
        ]
        if due:
            self._evict_pending = True
            out.append(SetTimer(max(min(due), self.p.evict_slack), EvictCache()))


#: the estimated bytes of one id's state (Plumtree.held_bytes), payload aside: tracemalloc over
#: 10^5 ids (interpreted module) measured 313 bytes a received id (its dict entries, round and
#: parent, both eviction entries) and 204 an awaited one
ID_BYTES = 320


def _add(peers: list[NodeId], peer: NodeId) -> None:
    """Insert ``peer`` into the sorted list ``peers`` unless it is there."""
    at = bisect_left(peers, peer)
    if at == len(peers) or peers[at] != peer:
        peers.insert(at, peer)


def _discard(peers: list[NodeId], peer: NodeId) -> None:
    """Remove ``peer`` from ``peers`` if it is there."""
    if peer in peers:
        peers.remove(peer)
