"""The ``gossip`` stack: topic publish/subscribe over HyParView + Plumtree, one swarm per topic.

Henriques & Pamplona (§2.2, "Peer Sampling Service") keeps track of subscribed topics and creates
the protocols for each; this module is that layer. Per topic the node runs one
:class:`~pubmesh.proto.gossip.hyparview.HyParView` and one
:class:`~pubmesh.proto.gossip.plumtree.Plumtree` instance, so payload for a topic reaches only that
topic's members (docs/protocols/gossip.md, "Topic swarms"). HyParView's NeighborUp/NeighborDown
events feed Plumtree, which keeps its eager and lazy peers a subset of the active view.

* **Subscribe(topic)**: join the topic's swarm through the contact (see the swarm discovery
  rule in :mod:`pubmesh.proto.gossip.hyparview`) and deliver its publications from then on.
* **Publish(topic)** on a topic the node does not subscribe to: the node joins the swarm as a
  *relay*, a member that forwards but never delivers (the spec's first option). The
  publication waits in a buffer until the join is confirmed, then is broadcast. The node stays
  in the swarm, so its next publications go out at once.
* **Subscribe(topic, history)**: as Subscribe, and the topic's past from the swarm's members
  (:mod:`pubmesh.proto.history`): the node asks each of its first ``QUERY_PEERS`` neighbours
  once, as HyParView brings them up, and delivers what they answer from Plumtree's message
  cache, marked replayed, through the same duplicate filter as live copies.
* **Unsubscribe / Leave**: DISCONNECT the swarm's active view and drop the instances.
* **PeerDown** goes to every swarm.
* A broadcast message from a peer outside the active view (a link left one-sided by
  non-FIFO delivery, or by a peer that missed our DISCONNECT) is still delivered if new, but
  the sender is told to DISCONNECT, so the overlay repairs itself with the traffic.

The node that is the cluster's contact also keeps the per-topic swarm directory.

Every swarm instance has an *epoch* (a counter per node). The layers' typed timers leave the
node wrapped as ``SwarmTimer(topic, epoch, timer)`` and come back the same way; a timer whose
epoch is not the current instance's (the topic was unsubscribed and subscribed again since) is
dropped here, so no layer ever sees a timer of an instance it is not.

The rule that keeps it correct
==============================
A swarm's two layers see only their own instance's inputs: HyParView's NeighborUp and
NeighborDown are Plumtree's only source of links, so its eager and lazy peers are the active
view; broadcast traffic from outside the active view is answered with DISCONNECT, and of it
only a GOSSIP reaches Plumtree, to be delivered if new, its sender then dropped again with a
NeighborDown; and a timer reaches only the instance that set it (its epoch). Each layer's own
rule (:mod:`.hyparview`, :mod:`.plumtree`) then holds per topic.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from pubmesh.proto.core import (
    MESSAGE_INFO,
    Deliver,
    HistoryRequest,
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
    topic_of,
)
from pubmesh.proto.gossip.hyparview import (
    MEMBERSHIP_MESSAGES,
    NONE,
    ContactReply,
    ContactRequest,
    DisconnectRequest,
    ForwardJoinAccept,
    HyParView,
    Join,
    Joined,
    JoinReply,
    JoinSwarm,
    JoinTimeout,
    LeaveSwarm,
    MembershipInput,
    MembershipOutput,
    Neighbor,
    NeighborDown,
    NeighborReply,
    NeighborUp,
    ShuffleTick,
    SwarmDirectory,
    SwarmJoined,
    SwarmSample,
)
from pubmesh.proto.gossip.params import GossipParams
from pubmesh.proto.gossip.plumtree import (
    Broadcast,
    BroadcastInput,
    BroadcastOutput,
    CacheBudget,
    Delivered,
    Gossip,
    Graft,
    IHave,
    Plumtree,
    Prune,
)
from pubmesh.proto.gossip.rooted import Beacon, RoundRequest
from pubmesh.proto.history import (
    ANSWERED_KEPT,
    QUERY_PEERS,
    HistoryFetch,
    HistoryItem,
    HistoryOffer,
    HistoryQuery,
    item_age,
)

__all__ = ["GossipNode", "GossipParams", "Swarm", "SwarmTimer"]


class Route(enum.Enum):
    """The part of the node a message goes to."""

    #: the HyParView instance of the message's swarm
    MEMBERSHIP = enum.auto()
    #: the swarm's Plumtree (and its rooted tree's beacons)
    BROADCAST = enum.auto()
    #: the contact's directory of swarms (a request for a member, a member's announcement)
    CONTACT = enum.auto()
    #: the topic's history (a new member's query, a member's answer)
    HISTORY = enum.auto()


#: each protocol layer gossip registers its messages under (``MESSAGE_INFO``) -> its route
_LAYER_ROUTES = {
    "membership": Route.MEMBERSHIP,
    "broadcast": Route.BROADCAST,
    "tree": Route.BROADCAST,
}
#: message class -> the part of the node that takes it (the receive path's one dict look-up):
#: its registered layer's, but for the two membership messages the contact answers itself
_ROUTES: dict[type[Message], Route] = {
    cls: _LAYER_ROUTES[MESSAGE_INFO[cls].layer]
    for cls in (*MEMBERSHIP_MESSAGES, Gossip, IHave, Graft, Prune, Beacon, RoundRequest)
}
_ROUTES[ContactRequest] = _ROUTES[SwarmJoined] = Route.CONTACT
for _cls in (HistoryQuery, HistoryOffer, HistoryFetch, HistoryItem):
    _ROUTES[_cls] = Route.HISTORY
#: the two routes the receive path tests, as module names (one look-up, not two)
_BROADCAST, _MEMBERSHIP = Route.BROADCAST, Route.MEMBERSHIP

#: membership messages whose sender holds (or is about to hold) us in its active view
LINKING = (Join, JoinReply, ForwardJoinAccept, Neighbor, NeighborReply)


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class SwarmTimer(Timer):
    """A layer's timer wrapped with the swarm instance it belongs to."""

    topic: str
    epoch: int
    timer: Timer


class Swarm:
    """One topic's protocol instances at one node."""

    __slots__ = (
        "answered",
        "asked",
        "broadcast",
        "buffer",
        "delivering",
        "epoch",
        "history",
        "membership",
        "topic",
    )

    def __init__(
        self, membership: HyParView, broadcast: Plumtree, delivering: bool, epoch: int
    ) -> None:
        self.topic = membership.topic
        self.membership = membership
        self.broadcast = broadcast
        self.delivering = delivering
        self.epoch = epoch
        self.buffer: list[Publish] = []
        #: the history request of the subscription, while members are still to be asked
        self.history: HistoryRequest | None = None
        #: members asked for the history -> the ids fetched from them and not yet come
        #: (None: its offer is awaited); made on first use
        self.asked: dict[NodeId, set[int] | None] | None = None
        #: nodes whose history query this member answered -> (when, the ids offered with
        #: when this node first had each; None once their fetch is served); made on first use
        self.answered: dict[NodeId, tuple[float, dict[int, float] | None]] | None = None


@mypyc_attr(native_class=False)  # its base, StackNode, is an interpreted class
class GossipNode(StackNode):
    """A gossip node: a set of topic swarms, plus the swarm directory if it is the contact."""

    __slots__ = (
        "_cache",
        "_directory",
        "contact",
        "delivered",
        "epochs",
        "left",
        "params",
        "swarms",
    )

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: GossipParams = ctx.params if ctx.params is not None else GossipParams()
        self.contact: NodeId = NONE
        self.swarms: dict[str, Swarm] = {}
        self._directory: SwarmDirectory | None = None
        #: the payload bytes all swarms cache, shared from the second swarm on (a node of one
        #: swarm, most of a 10^6-node run, carries none)
        self._cache: CacheBudget | None = None
        self.epochs = 0
        self.delivered = 0
        self.left = False

    @property
    def directory(self) -> SwarmDirectory:
        """The swarm directory (kept by the contact node; made on first use, so the other
        nodes of a 10^6-node run do not each carry an empty one)."""
        if self._directory is None:
            p = self.params
            # a member announces every announce_every shuffles: a view two announces old is
            # its member's last (it crashed or left)
            expiry = (2 * p.announce_every + 1) * p.shuffle_interval
            watch = p.component_watch if p.announce_every else 0
            self._directory = SwarmDirectory(
                p.directory_size,
                self.rng,
                watch,
                expiry,
                view_size=p.active_size,
                max_topics=p.directory_topics,
                per_node=p.directory_per_node,
                topic_expiry=p.directory_expiry,
            )
        return self._directory

    # ------------------------------------------------------------------ the one entry point
    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Receive(src=src, message=msg):
                self._receive(src, msg, now, out)
            case TimerFired(timer=timer):
                self._timer(timer, now, out)
            case PeerDown():
                for topic in sorted(self.swarms):
                    self._membership(self.swarms[topic], event, now, out)
            case Start(contacts=contacts):
                self.contact = contacts[0] if contacts else self.node_id
            case Subscribe(topic=topic, history=history):
                if self.left:
                    return out
                swarm = self.swarms.get(topic)
                if swarm is None:
                    swarm = self._join(topic, delivering=True, now=now, out=out)
                else:
                    swarm.delivering = True
                if history is not None:
                    swarm.history = history
                    swarm.asked = None
                    for peer in sorted(swarm.membership.active):
                        self._ask(swarm, peer, out)
            case Unsubscribe(topic=topic):
                self._drop(topic, now, out)
            case Publish() as publish:
                self._publish(publish, now, out)
            case Leave():
                self.left = True
                for topic in sorted(self.swarms):
                    self._drop(topic, now, out)
        return out

    def receive(self, src: NodeId, message: Message, now: float) -> list[Output]:
        """:meth:`handle` of a Receive, without the wrapper (the simulator's hot path). A
        broadcast message over an active link goes straight to Plumtree: the path
        :meth:`_receive`, :meth:`_receive_broadcast` and :meth:`_broadcast_receive` take."""
        out: list[Output] = []
        if _ROUTES.get(type(message)) is _BROADCAST:
            swarm = self.swarms.get(message.topic)  # type: ignore[attr-defined]
            if swarm is not None and src in swarm.membership.active:
                self._broadcast_out(swarm, swarm.broadcast.receive(src, message, now), out)
                return out
        self._receive(src, message, now, out)
        return out

    def fire(self, timer: Timer, now: float) -> list[Output]:
        """:meth:`handle` of a TimerFired, without the wrapper (the simulator's hot path)."""
        out: list[Output] = []
        self._timer(timer, now, out)
        return out

    def _timer(self, timer: Timer, now: float, out: list[Output]) -> None:
        if type(timer) is not SwarmTimer:
            return
        swarm = self.swarms.get(timer.topic)
        if swarm is None or swarm.epoch != timer.epoch:
            return  # an instance since dropped or replaced
        inner = timer.timer  # its layer's handle of a TimerFired, without the wrapper
        if isinstance(inner, ShuffleTick | JoinTimeout):
            self._membership_out(swarm, swarm.membership.fire(inner, now), now, out)
        else:
            self._broadcast_out(swarm, swarm.broadcast.fire(inner, now), out)

    # ------------------------------------------------------------------ swarms
    def _join(self, topic: str, delivering: bool, now: float, out: list[Output]) -> Swarm:
        self.epochs += 1
        directory = self.directory if self.contact == self.node_id else None
        membership = HyParView(self.node_id, topic, self.params, self.rng, directory)
        broadcast = Plumtree(self.node_id, topic, self.params)
        if self.swarms:  # the swarms' caches share one bound (pubmesh.proto.gossip.plumtree)
            if self._cache is None:
                self._cache = CacheBudget(self.params.cache_bytes)
                for other in self.swarms.values():
                    self._cache.join(other.broadcast)
            self._cache.join(broadcast)
        swarm = Swarm(membership, broadcast, delivering, self.epochs)
        self.swarms[topic] = swarm
        self._membership(swarm, JoinSwarm(self.contact), now, out)
        return swarm

    def _drop(self, topic: str, now: float, out: list[Output]) -> None:
        swarm = self.swarms.pop(topic, None)
        if swarm is not None:
            if self._cache is not None:  # its cache goes with it
                self._cache.leave(swarm.broadcast)
            self._membership(swarm, LeaveSwarm(), now, out)

    def _publish(self, publish: Publish, now: float, out: list[Output]) -> None:
        if self.left:
            return
        swarm = self.swarms.get(publish.topic)
        if swarm is None:
            swarm = self._join(publish.topic, delivering=False, now=now, out=out)
        if not swarm.membership.joined:
            swarm.buffer.append(publish)
            return
        self._broadcast(swarm, Broadcast(publish.pub_id, publish.payload), now, out)

    # ------------------------------------------------------------------ messages
    def _receive(self, src: NodeId, msg: Message, now: float, out: list[Output]) -> None:
        route = _ROUTES.get(type(msg))
        if route is None:
            self._receive_other(src, msg, now, out)
            return
        topic: str = msg.topic  # type: ignore[attr-defined]  # every routed message names one
        if route is _BROADCAST:
            self._receive_broadcast(src, msg, topic, now, out)
            return
        swarm = self.swarms.get(topic)
        if route is Route.HISTORY:
            if swarm is not None:
                self._history(swarm, src, msg, now, out)
            return
        if route is _MEMBERSHIP:
            if swarm is None:
                self._refuse(src, msg, topic, out)
                return
            self._membership_receive(swarm, src, msg, now, out)
            return
        # the contact names itself too when it is a joined member
        me = self.node_id if swarm is not None and swarm.membership.joined else NONE
        if type(msg) is ContactRequest:
            member = self.directory.lookup(topic, src, msg.dead, extra=me, now=now)
            out.append(Send(src, ContactReply(topic=topic, member=member)))
            return
        # SwarmJoined
        if self.contact == self.node_id:
            assert type(msg) is SwarmJoined
            directory = self.directory
            directory.record(topic, src, now)
            answer = directory.answer(
                topic, src, msg.active, now, periodic=msg.periodic, room=msg.room, extra=me
            )
            if answer is not None:
                member, bridge = answer
                out.append(Send(src, SwarmSample(topic=topic, member=member, bridge=bridge)))

    def _receive_other(self, src: NodeId, msg: Message, now: float, out: list[Output]) -> None:
        """A message of no gossip type (a junk message, another stack's): one that names a
        topic swarm as a string goes to its broadcast layer, which ignores what it does not
        know; anything else is dropped."""
        topic = topic_of(msg)
        if topic is not None:
            self._receive_broadcast(src, msg, topic, now, out)

    def _receive_broadcast(
        self, src: NodeId, msg: Message, topic: str, now: float, out: list[Output]
    ) -> None:
        """A broadcast-layer message: to Plumtree if it came over an active link."""
        swarm = self.swarms.get(topic)
        if swarm is None or src not in swarm.membership.active:
            if type(msg) is Beacon:
                # a new neighbour's beacon goes out with its NeighborUp, which may be before
                # its NeighborReply: not a stale link, and the next round repeats it
                return
            self._receive_off_link(src, msg, topic, swarm, now, out)
            return
        self._broadcast_receive(swarm, src, msg, now, out)

    def _refuse(self, src: NodeId, msg: Message, topic: str, out: list[Output]) -> None:
        """A membership message for a swarm we are not (or no longer) in: refuse every message
        by which the sender puts us in its active view (including late answers to requests
        made before we left), so that its view stays true."""
        if isinstance(msg, LINKING) and not (isinstance(msg, NeighborReply) and not msg.accepted):
            out.append(Send(src, DisconnectRequest(topic=topic)))

    def _receive_off_link(
        self,
        src: NodeId,
        msg: Message,
        topic: str,
        swarm: Swarm | None,
        now: float,
        out: list[Output],
    ) -> None:
        """Broadcast traffic from outside the active view."""
        out.append(Send(src, DisconnectRequest(topic=topic)))
        if swarm is None or type(msg) is not Gossip:
            return
        # one-sided link: keep the payload, tell the sender we are not its neighbour
        outputs: list[Output] = []
        self._broadcast_receive(swarm, src, msg, now, outputs)
        self._broadcast(swarm, NeighborDown(src), now, outputs)
        out.extend(o for o in outputs if not (isinstance(o, Send) and o.dst == src))

    # ------------------------------------------------------------------ layer outputs
    def _membership(
        self, swarm: Swarm, event: MembershipInput, now: float, out: list[Output]
    ) -> None:
        """Run HyParView; its neighbour events feed Plumtree, its timers leave wrapped."""
        self._membership_out(swarm, swarm.membership.handle(event, now), now, out)

    def _membership_receive(
        self, swarm: Swarm, src: NodeId, msg: Message, now: float, out: list[Output]
    ) -> None:
        """:meth:`_membership` of a Receive, without the wrapper."""
        self._membership_out(swarm, swarm.membership.receive(src, msg, now), now, out)

    def _membership_out(
        self, swarm: Swarm, items: list[MembershipOutput], now: float, out: list[Output]
    ) -> None:
        for item in items:
            cls = type(item)
            if cls is Send:
                out.append(item)  # type: ignore[arg-type]
            elif cls is NeighborUp or cls is NeighborDown:
                self._broadcast(swarm, item, now, out)  # type: ignore[arg-type]
                if cls is NeighborUp and swarm.history is not None:
                    self._ask(swarm, item.peer, out)  # type: ignore[union-attr]
            elif cls is Joined:
                buffered, swarm.buffer = swarm.buffer, []
                for publish in buffered:
                    self._broadcast(swarm, Broadcast(publish.pub_id, publish.payload), now, out)
            elif isinstance(item, SetTimer):
                out.append(SetTimer(item.after, SwarmTimer(swarm.topic, swarm.epoch, item.timer)))
            else:
                out.append(item)  # type: ignore[arg-type]

    def _broadcast(
        self, swarm: Swarm, event: BroadcastInput, now: float, out: list[Output]
    ) -> None:
        """Run Plumtree; deliveries reach the application if the node subscribes."""
        self._broadcast_out(swarm, swarm.broadcast.handle(event, now), out)

    def _broadcast_receive(
        self, swarm: Swarm, src: NodeId, msg: Message, now: float, out: list[Output]
    ) -> None:
        """:meth:`_broadcast` of a Receive, without the wrapper."""
        self._broadcast_out(swarm, swarm.broadcast.receive(src, msg, now), out)

    def _broadcast_out(self, swarm: Swarm, items: list[BroadcastOutput], out: list[Output]) -> None:
        cache = self._cache
        if cache is not None and cache.used > cache.limit:
            # the swarm that added could not make room from its own cache: the others' oldest
            # go (pubmesh.proto.gossip.plumtree, the byte bound)
            for other in self.swarms.values():
                if other is not swarm:
                    other.broadcast.shrink_cache()
        for item in items:
            cls = type(item)
            if cls is Send:
                out.append(item)  # type: ignore[arg-type]
            elif isinstance(item, Delivered):
                if swarm.delivering:
                    self.delivered += 1
                    out.append(Deliver(swarm.topic, item.pub_id, item.payload, item.hops))
            elif isinstance(item, SetTimer):
                out.append(SetTimer(item.after, SwarmTimer(swarm.topic, swarm.epoch, item.timer)))
            else:
                out.append(item)

    # ------------------------------------------------------------------ history
    def _ask(self, swarm: Swarm, peer: NodeId, out: list[Output]) -> None:
        """Ask ``peer``, a new neighbour, which publications of the topic's past it holds, if
        fewer than QUERY_PEERS members have been asked (pubmesh.proto.history)."""
        request = swarm.history
        asked = swarm.asked
        if asked is None:
            asked = swarm.asked = {}
        if request is None or peer in asked:
            return
        asked[peer] = None
        if len(asked) >= QUERY_PEERS:
            swarm.history = None  # every member it will ask is asked
        out.append(
            Send(
                peer,
                HistoryQuery(topic=swarm.topic, count=request.count, seconds=request.seconds),
            )
        )

    def _history(
        self, swarm: Swarm, src: NodeId, msg: Message, now: float, out: list[Output]
    ) -> None:
        """The history exchange (pubmesh.proto.history): as a member, a query (answered with
        the ids of Plumtree's cache, at most once per ``history_interval`` per node and
        ``history_items`` ids) and a fetch (one per query, of ids offered); as a new member,
        an offer and the items fetched (taken only from a member asked, while subscribed)."""
        p = self.params
        cls = type(msg)
        if cls is HistoryQuery or cls is HistoryFetch:
            answered = swarm.answered
            if answered is None:
                answered = swarm.answered = {}
            last = answered.get(src)
            if cls is HistoryFetch:
                if last is None or last[1] is None:
                    return  # nothing offered, or its fetch served
                answered[src] = (last[0], None)
                payloads = swarm.broadcast.payloads
                offered = last[1]
                for pub_id in msg.ids[: p.history_items]:  # type: ignore[attr-defined]
                    payload = payloads.get(pub_id)
                    first = offered.get(pub_id)
                    if first is not None and payload is not None:
                        answer = HistoryItem(
                            topic=swarm.topic, pub_id=pub_id, payload=payload, age=now - first
                        )
                        out.append(Send(src, answer))
                return
            if last is not None and now - last[0] < p.history_interval:
                counters = swarm.broadcast.counters
                counters["history_over_limit"] = counters.get("history_over_limit", 0) + 1
                return
            if len(answered) >= ANSWERED_KEPT:
                del answered[next(iter(answered))]  # the node answered longest ago
            answered.pop(src, None)
            query: HistoryQuery = msg  # type: ignore[assignment]
            count = min(query.count, p.history_items) if query.count > 0 else p.history_items
            held = swarm.broadcast.cached(count, max(query.seconds, 0.0), now)
            ids = tuple(pub_id for pub_id, _, _ in held)
            answered[src] = (now, {pub_id: now - age for pub_id, _, age in held})
            out.append(Send(src, HistoryOffer(topic=swarm.topic, ids=ids)))
            return
        asked = swarm.asked
        if asked is None or src not in asked or not swarm.delivering:
            return  # not a member we asked, or no longer subscribed
        fetched = asked[src]
        if cls is HistoryOffer:
            if fetched is not None:
                return  # one offer per query
            received = swarm.broadcast.received
            pending: set[int] = set()
            for others in asked.values():
                if others:
                    pending |= others
            wanted = tuple(
                pub_id
                for pub_id in msg.ids[: p.history_items]  # type: ignore[attr-defined]
                if pub_id not in received and pub_id not in pending
            )
            asked[src] = set(wanted)
            if wanted:
                out.append(Send(src, HistoryFetch(topic=swarm.topic, ids=wanted)))
            return
        if cls is not HistoryItem or not fetched or msg.pub_id not in fetched:  # type: ignore[attr-defined]
            return
        item: HistoryItem = msg  # type: ignore[assignment]
        fetched.discard(item.pub_id)
        outputs: list[BroadcastOutput] = []
        age = item_age(item.age)
        if swarm.broadcast.replay(item.pub_id, item.payload, src, now, outputs, age=age):
            self.delivered += 1
            out.append(Deliver(swarm.topic, item.pub_id, item.payload, 1, replayed=True, age=age))
            out.append(
                TraceRecord(
                    "history.replayed",
                    {"topic": swarm.topic, "pub_id": item.pub_id, "from": src, "age": age},
                )
            )
        self._broadcast_out(swarm, outputs, out)

    # ------------------------------------------------------------------ queries
    def monitored_peers(self) -> Iterable[NodeId]:
        peers: set[NodeId] = set()
        for swarm in self.swarms.values():
            peers.update(swarm.membership.active)
            if swarm.membership.pending_join != NONE:
                peers.add(swarm.membership.pending_join)
        return peers

    def snapshot(self) -> Iterable[SnapshotRow]:
        rows = []
        for topic in sorted(self.swarms):
            swarm = self.swarms[topic]
            hv, pt = swarm.membership, swarm.broadcast
            rows.append(
                SnapshotRow(
                    topic,
                    "membership",
                    tuple(sorted(hv.active)),
                    {
                        "passive": sorted(hv.passive),
                        "joined": hv.joined,
                        "delivering": swarm.delivering,
                    },
                )
            )
            rows.append(
                SnapshotRow(topic, "broadcast", tuple(sorted(pt.eager)), {"lazy": sorted(pt.lazy)})
            )
        return rows

    def subscriptions(self) -> Iterable[str]:
        return sorted(t for t, s in self.swarms.items() if s.delivering)

    def held_bytes(self) -> int:
        held = sum(swarm.broadcast.held_bytes() for swarm in self.swarms.values())
        if self._directory is not None:
            held += self._directory.held_bytes()
        return held

    def statistics(self) -> NodeStatistics:
        received: dict[str, int] = {}
        for swarm in self.swarms.values():
            for counters in (swarm.membership.counters, swarm.broadcast.counters):
                for name, count in counters.items():
                    received[name] = received.get(name, 0) + count
        return NodeStatistics(
            role=self.ctx.role,
            topics=tuple(self.subscriptions()),
            delivered=self.delivered,
            neighbors={
                t: tuple(sorted(s.membership.active)) for t, s in sorted(self.swarms.items())
            },
            received_by_type=dict(sorted(received.items())),
            counters={
                "swarms": len(self.swarms),
                "passive_view": sum(len(s.membership.passive) for s in self.swarms.values()),
                "cached_ids": sum(len(s.broadcast.received) for s in self.swarms.values()),
                "cached_payloads": sum(len(s.broadcast.payloads) for s in self.swarms.values()),
                "missing_ids": sum(len(s.broadcast.missing) for s in self.swarms.values()),
                "ihave_over_limit": sum(s.broadcast.ihave_over_limit for s in self.swarms.values()),
                "graft_over_limit": sum(s.broadcast.graft_over_limit for s in self.swarms.values()),
                "cache_evicted_early": sum(
                    s.broadcast.cache_evicted_early for s in self.swarms.values()
                ),
                "held_bytes": self.held_bytes(),
            },
        )
