"""Plumtree: epidemic broadcast trees over one topic swarm's HyParView active view.

Source: Leitão, Pereira, Rodrigues, *Epidemic Broadcast Trees* (SRDS 2007), §3 (Algorithm 1
and 2) and §3.8 (optimization); ../shared/specs/gossip.md; timer handling after the course
report's fixes (papers/004 §3.4).

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
delivers at hop r + 1 and forwards round r + 1. Timers are values with a generation per message
id, so a timer for a message that has since arrived, or a superseded one, is ignored (the
report's §3.4 problem with timers inside timers cannot happen). ``flood = true`` turns the
tree off (every neighbour eager, no prune, no IHAVE): the baseline Plumtree is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass

from pubmesh.proto.core import Message, NodeId, Output, PubId, Send, SetTimer, Timer, message
from pubmesh.proto.hyparview import GossipParams


@message(120, layer="broadcast", payload=True)
class Gossip(Message):
    topic: str
    pub_id: int
    round: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


@message(121, layer="broadcast")
class IHave(Message):
    """Announcements (id, round); one, or a batch when ``ihave_batch_interval`` > 0."""

    topic: str
    announcements: tuple[tuple[int, int], ...]

    def publication(self) -> int | None:
        return self.announcements[0][0] if len(self.announcements) == 1 else None


@message(122, layer="broadcast")
class Graft(Message):
    """Make me eager again; ``request``: and send me message ``pub_id`` (False for the
    optimization's graft, which only repairs the tree)."""

    topic: str
    pub_id: int
    round: int
    request: bool

    def publication(self) -> int | None:
        return self.pub_id if self.request else None


@message(123, layer="broadcast")
class Prune(Message):
    topic: str


@dataclass(frozen=True, slots=True)
class Delivered:
    """Plumtree's deliver event for the stack (which decides whether the app sees it)."""

    pub_id: PubId
    payload: bytes
    hops: int


GRAFT_TIMER = "plumtree.graft"
IHAVE_TIMER = "plumtree.ihave"

BroadcastOutput = Output | Delivered


class Plumtree:
    """The broadcast state machine of one node in one topic swarm."""

    def __init__(self, me: NodeId, topic: str, params: GossipParams, epoch: int) -> None:
        self.me = me
        self.topic = topic
        self.p = params
        self.epoch = epoch
        self.eager: set[NodeId] = set()
        self.lazy: set[NodeId] = set()
        #: received messages: id -> (payload, round received at, who sent it first)
        self.received: dict[PubId, tuple[bytes, int, NodeId]] = {}
        #: announcements of messages not received yet: id -> [(announcer, round)]
        self.missing: dict[PubId, list[tuple[NodeId, int]]] = {}
        #: the generation of the graft timer running for an id
        self.graft_generation: dict[PubId, int] = {}
        #: batched announcements per lazy peer
        self.lazy_queue: dict[NodeId, list[tuple[int, int]]] = {}
        self.counters: dict[str, int] = {}

    # ------------------------------------------------------------------ neighbours
    def neighbor_up(self, peer: NodeId) -> None:
        """NeighborUp(q): q becomes eager."""
        self.eager.add(peer)
        self.lazy.discard(peer)

    def neighbor_down(self, peer: NodeId) -> None:
        """NeighborDown(q): drop q from both sets and its announcements."""
        self.eager.discard(peer)
        self.lazy.discard(peer)
        self.lazy_queue.pop(peer, None)
        for pub_id in list(self.missing):
            self.missing[pub_id] = [a for a in self.missing[pub_id] if a[0] != peer]

    # ------------------------------------------------------------------ broadcast
    def broadcast(self, pub_id: PubId, payload: bytes) -> list[BroadcastOutput]:
        """Broadcast(m): deliver, mark received, GOSSIP(round 0) to eager, IHAVE to lazy."""
        out: list[BroadcastOutput] = []
        if pub_id in self.received:
            return out
        self.received[pub_id] = (payload, 0, self.me)
        out.append(Delivered(pub_id, payload, 0))
        self._push(pub_id, 0, payload, exclude=-1, out=out)
        return out

    def _push(
        self, pub_id: PubId, rnd: int, payload: bytes, exclude: NodeId, out: list[BroadcastOutput]
    ) -> None:
        # messages are immutable: one object serves every peer
        gossip = Gossip(topic=self.topic, pub_id=pub_id, round=rnd, payload=payload)
        for peer in sorted(self.eager):
            if peer != exclude:
                out.append(Send(peer, gossip))
        if self.p.flood or not self.lazy:
            return
        announcement = IHave(topic=self.topic, announcements=((pub_id, rnd),))
        for peer in sorted(self.lazy):
            if peer == exclude:
                continue
            if self.p.ihave_batch_interval > 0:
                queue = self.lazy_queue.setdefault(peer, [])
                queue.append((pub_id, rnd))
                if len(queue) == 1:
                    out.append(
                        SetTimer(
                            self.p.ihave_batch_interval,
                            Timer(IHAVE_TIMER, self.topic, self.epoch, peer),
                        )
                    )
            else:
                out.append(Send(peer, announcement))

    # ------------------------------------------------------------------ the handler
    def receive(self, src: NodeId, msg: Message) -> list[BroadcastOutput]:
        out: list[BroadcastOutput] = []
        name = msg.TYPE_NAME
        self.counters[name] = self.counters.get(name, 0) + 1
        match msg:
            case Gossip():
                self._on_gossip(src, msg, out)
            case IHave(announcements=announcements):
                self._on_ihave(src, announcements, out)
            case Graft(pub_id=pub_id, round=rnd, request=request):
                # "GRAFT(id, round) from s: s becomes eager; if id was received, send it
                # GOSSIP(m, id, round)."
                self.neighbor_up(src)
                got = self.received.get(pub_id)
                if request and got is not None:
                    out.append(
                        Send(
                            src, Gossip(topic=self.topic, pub_id=pub_id, round=rnd, payload=got[0])
                        )
                    )
            case Prune():
                # "PRUNE from s: s becomes lazy."
                if src in self.eager:
                    self.eager.discard(src)
                    self.lazy.add(src)
        return out

    def _on_gossip(self, src: NodeId, msg: Gossip, out: list[BroadcastOutput]) -> None:
        pub_id, rnd = msg.pub_id, msg.round + 1
        if pub_id in self.received:
            # "Duplicate: make s lazy and send PRUNE to s."
            if not self.p.flood:
                self._make_lazy(src)
                out.append(Send(src, Prune(topic=self.topic)))
            return
        # "first time: deliver, mark, cancel id's timer, forward GOSSIP with round+1 to eager
        # peers except s, IHAVE to lazy peers except s, make s eager, run the optimization."
        self.received[pub_id] = (msg.payload, rnd, src)
        out.append(Delivered(pub_id, msg.payload, rnd))
        self.graft_generation.pop(pub_id, None)
        announcements = self.missing.pop(pub_id, [])
        self._push(pub_id, rnd, msg.payload, exclude=src, out=out)
        if self.p.flood:
            return
        self.neighbor_up(src)
        if self.p.optimization and announcements:
            announcer, best = min(announcements, key=lambda a: (a[1], a[0]))
            self._optimize(pub_id, announcer, best, out)

    def _on_ihave(
        self, src: NodeId, announcements: tuple[tuple[int, int], ...], out: list[BroadcastOutput]
    ) -> None:
        for pub_id, rnd in announcements:
            if pub_id in self.received:
                if self.p.optimization:
                    self._optimize(pub_id, src, rnd, out)
                continue
            # "record the announcement; start timer(id, timeout1) if none runs."
            self.missing.setdefault(pub_id, []).append((src, rnd))
            if pub_id not in self.graft_generation:
                self.graft_generation[pub_id] = 1
                out.append(
                    SetTimer(self.p.ihave_timeout1, Timer(GRAFT_TIMER, self.topic, pub_id, 1))
                )

    def _optimize(
        self, pub_id: PubId, announcer: NodeId, announced_round: int, out: list[BroadcastOutput]
    ) -> None:
        """§3.8: the announcer would have delivered at hop announced_round + 1; if that beats
        the tree by ``threshold`` hops or more, graft the announcer and prune the parent."""
        payload, received_round, parent = self.received[pub_id]
        if (
            received_round - (announced_round + 1) < self.p.optimization_threshold
            or announcer == parent
            or parent == self.me
            or announcer not in self.lazy
        ):
            return
        self.neighbor_up(announcer)
        out.append(
            Send(
                announcer,
                Graft(topic=self.topic, pub_id=pub_id, round=announced_round, request=False),
            )
        )
        self._make_lazy(parent)
        out.append(Send(parent, Prune(topic=self.topic)))
        self.received[pub_id] = (payload, announced_round + 1, announcer)

    def _make_lazy(self, peer: NodeId) -> None:
        if peer in self.eager or peer in self.lazy:
            self.eager.discard(peer)
            self.lazy.add(peer)

    # ------------------------------------------------------------------ timers
    def timer(self, timer: Timer) -> list[BroadcastOutput]:
        out: list[BroadcastOutput] = []
        if timer.kind == GRAFT_TIMER:
            pub_id = timer.key
            if self.graft_generation.get(pub_id) != timer.generation or pub_id in self.received:
                return out
            entries = self.missing.get(pub_id)
            if not entries:
                self.graft_generation.pop(pub_id, None)
                return out
            # "Timer(id) fires: start timer(id, timeout2); take the first announcement for id;
            # make its sender eager and send it GRAFT(id, round)."
            announcer, rnd = entries.pop(0)
            generation = timer.generation + 1
            self.graft_generation[pub_id] = generation
            out.append(
                SetTimer(self.p.ihave_timeout2, Timer(GRAFT_TIMER, self.topic, pub_id, generation))
            )
            self.neighbor_up(announcer)
            out.append(
                Send(announcer, Graft(topic=self.topic, pub_id=pub_id, round=rnd, request=True))
            )
        elif timer.kind == IHAVE_TIMER and timer.key == self.epoch:
            peer = timer.generation
            queue = self.lazy_queue.pop(peer, [])
            if queue and peer in self.lazy:
                out.append(Send(peer, IHave(topic=self.topic, announcements=tuple(queue))))
        return out
