"""The clique node: self-stabilizing topic groups in the relay model (Scheideler's lecture chapter
9: the relay model, Build-Clique with Join / Leave / Search; docs/protocols/relay.md).

How it works
============
Every node has one relay layer (:mod:`pubmesh.proto.relay.layer`) and, per subscribed topic, a
**Build-Clique instance**: its IN relay ``in``, the set ``N`` of direct OUT relays it keeps, the
set ``D`` of relays it means to get rid of, and for leaving ``leaving``, ``a_out`` and
``a_in`` (Scheideler's lecture §9.2; spec §3). Every ``timeout`` seconds the instance runs Timeout:

* relays that are not direct, or redundant (another relay in N reaches the same sink and is
  preferred: direct, then older), move from N to D;
* it picks u in N and w in N ∪ {in} at random and asks w to introduce itself to u
  (``w ← AskForIntro(u)``): w then sends u a reference to its own ``in``, so u gets a direct
  relay to w (``Introduce``);
* every relay in D that nothing points at any more is delegated: its sink gets a reference to
  our ``in`` and the relay is deleted. (A relay still pointed at waits: deleting it would cut
  a path the relay graph's weak connectivity may depend on, Scheideler's lecture Theorem 9.3.)

From any weakly connected relay graph this converges to a clique of direct relays
(Theorem 9.3) and stays one (Theorem 9.4); a joiner is known by everyone within
O(n log n) rounds (Theorem 9.5).

**Leave** (Scheideler's lecture, spec §3): a leaving instance moves N into D and asks the sinks of
its D relays to reverse them (``AskToReverse(in)``): they drop their relays to it and answer with a
relay back, which the leaver files in D again and delegates, until nothing points at it; then it
stops. Phase 2 is the spec's repair (``leave_phase2 = "anchor"``): once nobody holds ``in`` the
leaver hands its remaining out-neighbours its *anchor* ``a_out``, so that the last links through it
are replaced by links around it before it stops (the slides as written can leave a path A–L–Y with Y
isolated; ``leave_phase2 = "slides"`` keeps that behaviour).

**Pub/sub** (spec §7). Node 0 is the *contact*: a non-delivering member of every group, which
newcomers Join through a bootstrap relay to its PORT (every node's rid-0 IN relay). A
publication is delivered at its publisher (if a member) and flooded: to one relay per sink in
N ∪ D ∪ {a_out}, with the set of members already sent a copy, so that in a clique every member
gets it once, in one hop (n − 1 messages). A non-member publishes through the contact.

**Topic history** (an addition, not in the lecture nor the spec: docs/protocols/clique.md
"Topic history"). The contact, which every publication of a group reaches, retains
each topic's publications (:class:`pubmesh.proto.history.Retention`: ``history_count``,
``history_seconds``, ``history_bytes``), as an MQTT broker's retained messages or a Zenoh
storage would. A subscriber that asks for history joins with ``JoinWithHistory``: the Join of
spec §7 with the request in it, so the contact handles the Join (the joiner is in its N from
then on, and gets every later publication live) and, in the same step, sends back through the
relay that Join gave it one ``HistoryPub`` per retained publication the request covers (no
offer and fetch: there is one source, so nothing to fetch once rather than twice). The
subscriber takes them only straight from the contact, while it waits (``history_wait``),
still subscribed, at most as many as it asked for, through the same ``seen`` filter as live
copies (one delivery per publication), delivered ``replayed``. The contact answers a node at
most once per ``history_interval`` per topic, ``history_items`` publications at most, and
only to the node that sent the Join.

The rule that keeps it correct
==============================
**Nothing is deleted while something points at it, and every introduction is safe** (a node
only ever hands out its own ``in``, or a relay that keeps pointing where it did): the relay
graph stays weakly connected, which is all the convergence proof needs.

Where the code is
=================
The node holds two parts and hands itself to each of their calls as
:class:`~pubmesh.proto.clique.ops.RelayOps`, the relay model's operations (``send``,
``delete``, ``introduction``, ``apply``, ``stop``, ``leave_timeout``): its joining rules
``build`` (:class:`~pubmesh.proto.clique.build.BuildClique`: Join, AskForIntro, Introduce,
Feedback, Timeout; a stack built on this one gives its own, as d2g does) and
:class:`~pubmesh.proto.clique.leave.LeaveProtocol` (Leave, AskToReverse, Reverse,
LeaveTimeout). A part holds no reference to the node. What a stack built on this one adds to
the node itself (``_dispatch_more`` for its own messages, ``apply``, ``_probe_more``,
``_rejoins``) it adds by overriding those methods.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pubmesh.proto.clique.build import BuildClique
from pubmesh.proto.clique.instance import Instance
from pubmesh.proto.clique.leave import LeaveProtocol
from pubmesh.proto.clique.messages import (
    AskForIntro,
    AskToReverse,
    Feedback,
    HistoryPub,
    Introduce,
    Join,
    JoinWithHistory,
    Pub,
    Reverse,
    Search,
)
from pubmesh.proto.clique.ops import BuildRules
from pubmesh.proto.clique.params import CliqueParams
from pubmesh.proto.core import (
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
from pubmesh.proto.history import AnswerLimit, Retained, Retention, checked_retained, item_age
from pubmesh.proto.relay.layer import IN, PORT, ROUTED, Delivery, Outcome, Relay, RelayLayer
from pubmesh.proto.relay.messages import (
    Adopt,
    HoldCount,
    Nudge,
    Probe,
    RelayGone,
    Release,
    SinkFix,
)

CONTACT = "contact"
_LAYER_MESSAGES = (Release, Probe, HoldCount, RelayGone, SinkFix, Adopt, Nudge)
#: local hops one handler call runs at most (see CliqueNode._loopback)
LOOPBACK_BUDGET = 256


@dataclass(frozen=True, slots=True)
class GroupTick(Timer):
    """Timeout of the instance of ``topic`` whose ``in`` is ``key`` (spec §8)."""

    topic: str
    key: int


@dataclass(slots=True)
class HistoryWait:
    """A subscriber's history request while it waits for the contact's answer (module essay,
    "Topic history")."""

    request: HistoryRequest
    #: publications it still takes (the request's count, at most ``history_items``)
    left: int
    #: it takes them until then (``history_wait`` after it asked)
    until: float
    #: publications taken so far, and how many the contact's answer has (None: none came)
    got: int = 0
    total: int | None = None


class CliqueNode(StackNode):
    """A node of the clique stack (module essay)."""

    #: the parameters' type (d2g's node has its own) and the snapshot rows' layer name
    PARAMS: type[CliqueParams] = CliqueParams
    LAYER = "clique"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: CliqueParams = (
            ctx.params if isinstance(ctx.params, self.PARAMS) else self.PARAMS()
        )
        p = self.params
        self.layer = RelayLayer(
            self.node_id, self.rng, probe_after=p.probe_after * p.timeout, grace=p.grace * p.timeout
        )
        self.is_contact = ctx.role == CONTACT
        self.contact: NodeId | None = None
        self.bootstrap: Relay | None = None
        self.instances: dict[str, Instance] = {}
        #: topics the application subscribed to (an instance that stops while its topic is
        #: still wanted is replaced by a fresh one, spec §7 rejoin)
        self.wanted: set[str] = set()
        #: instances installed from outside (a corrupted initial state) whose Timeout is not
        #: scheduled yet: armed with the next output
        self.unarmed: set[str] = set()
        self.started = False
        self.delivered = 0
        self.counters: dict[str, int] = {}
        self.received: dict[str, int] = {}
        #: topic history (module essay): the contact's retained publications per topic, when
        #: it last answered each (topic, node), and a subscriber's requests awaiting an answer
        self.retained: dict[str, Retention] = {}
        self.history_answered = AnswerLimit()
        self.waits: dict[str, HistoryWait] = {}
        #: the network sender of the frame being handled (the relay layer's deliveries do
        #: not name it): history is taken from, and sent to, only the node that sent the frame
        self.frame_src: NodeId = -1
        #: the parts: Build-Clique's handlers and Timeout, and Leave's reversal
        self.build: BuildRules = BuildClique()
        self.leave_protocol = LeaveProtocol()

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    # ------------------------------------------------------------------------------ handle
    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Receive(src=src, message=message):
                self._receive(src, message, now, out)
            case TimerFired(timer=timer):
                if isinstance(timer, GroupTick):
                    self._tick(timer, now, out)
            case PeerDown(peer=peer):
                if peer != self.node_id:
                    outcome = Outcome()
                    self.layer.peer_down(peer, now, outcome)
                    self.apply(outcome, now, out)
            case Start(contacts=contacts):
                self._start(contacts, now)
            case Subscribe(topic=topic, history=history):
                self._subscribe(topic, now, history, out)
            case Unsubscribe(topic=topic):
                self.wanted.discard(topic)
                self.waits.pop(topic, None)
                instance = self.instances.get(topic)
                if instance is not None and not instance.leaving and not self.is_contact:
                    self.leave_protocol.leave(self, instance, now)
            case Publish():
                self._publish(event, now, out)
            case Leave():
                self.wanted.clear()
                self.waits.clear()
                for topic in sorted(self.instances):
                    instance = self.instances[topic]
                    if not instance.leaving:
                        self.leave_protocol.leave(self, instance, now)
        if self.unarmed:
            for topic in sorted(self.unarmed):
                instance = self.instances.get(topic)
                if instance is not None:
                    first = self.params.timeout * self.rng.uniform(0.0, 1.0)
                    out.append(SetTimer(first, GroupTick(topic, instance.key)))
            self.unarmed.clear()
        me = self.node_id
        if any(type(o) is Send and o.dst == me for o in out):
            out = self._loopback(now, out)
        return out

    def _loopback(self, now: float, out: list[Output]) -> list[Output]:
        """Frames (and relay bookkeeping) addressed to this node itself: a relay whose next is
        one of our own relays (a reference to our own OUT relay came back to us, or a
        corrupted state's) is a local hop, run here (the runtimes drop a node's messages to
        itself). ``LOOPBACK_BUDGET`` bounds a cycle of our own relays; the layer's hop limit
        then kills it."""
        me = self.node_id
        done: list[Output] = []
        queue = list(reversed(out))
        budget = LOOPBACK_BUDGET
        while queue:
            item = queue.pop()
            if type(item) is not Send or item.dst != me:
                done.append(item)
                continue
            if budget <= 0:
                self.count("loopback_dropped")
                continue
            budget -= 1
            outcome = Outcome()
            self.layer.receive(me, item.message, now, outcome)
            more: list[Output] = []
            self.frame_src = me
            self.apply(outcome, now, more)
            self.frame_src = -1
            queue.extend(reversed(more))
        return done

    def _start(self, contacts: tuple[NodeId, ...], now: float) -> None:
        if self.started:
            return
        self.started = True
        valid = [c for c in contacts if type(c) is int and c >= 0]
        self.contact = valid[0] if valid else None
        if self.contact is not None and self.contact != self.node_id:
            self.bootstrap = self.layer.new_out(None, (self.contact, PORT), self.contact, True, now)
        if self.contact is None or self.contact == self.node_id:
            self.is_contact = True

    # ------------------------------------------------------------------------ instances
    def _new_instance(self, topic: str, now: float, out: list[Output]) -> Instance:
        instance = Instance(topic, self.layer.new_in(topic, now))
        instance.delivering = not self.is_contact
        self.instances[topic] = instance
        first = self.params.timeout * self.rng.uniform(0.0, 1.0)
        out.append(SetTimer(first, GroupTick(topic, instance.key)))
        return instance

    def _subscribe(
        self, topic: str, now: float, history: HistoryRequest | None, out: list[Output]
    ) -> None:
        """spec §7: an instance, then Join(in) through the bootstrap relay to the contact;
        with a history request, the Join asks for the topic's history too (module essay)."""
        if not self.started or type(topic) is not str:
            return
        self.wanted.add(topic)
        if isinstance(history, HistoryRequest) and not self.is_contact:
            p = self.params
            count = history.count if type(history.count) is int and history.count > 0 else 0
            left = min(count, p.history_items) if count else p.history_items
            self.waits[topic] = HistoryWait(history, left, now + p.history_wait)
        instance = self.instances.get(topic)
        if instance is not None and not instance.leaving:
            instance.delivering = not self.is_contact
            if topic in self.waits:
                self._join(instance, now, out)  # a member already: the Join asks again
            return
        if instance is not None:
            return  # still leaving the old one: a fresh one after it stops (spec §7 rejoin)
        instance = self._new_instance(topic, now, out)
        self._join(instance, now, out)

    def _join(self, instance: Instance, now: float, out: list[Output]) -> None:
        if self.bootstrap is None:
            return
        wait = self.waits.get(instance.topic)
        message: Join
        if wait is not None and wait.total is None and now <= wait.until:
            # nothing of the answer came yet (a rejoin repeats the request; the contact
            # answers a node at most once per history_interval)
            message = JoinWithHistory(
                topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
                node=self.layer.ref(instance.in_),
                count=wait.request.count, seconds=float(wait.request.seconds),
            )  # fmt: skip
            self.count("history_asked")
        else:
            message = Join(
                topic=instance.topic,
                rid=0,
                prev=0,
                sink=0,
                direct=False,
                hop=0,
                node=self.layer.ref(instance.in_),
            )
        self.send(self.bootstrap, message, now, out)
        self.count("joins")

    def send(self, relay: Relay, message: Message, now: float, out: list[Output]) -> None:
        """``relay ← message``; to one of our own IN relays it is a local call (Scheideler's
        lecture: "w ← … with w = in is a local call, run immediately")."""
        if relay.kind == IN:
            return
        send = self.layer.send(relay, message, now)
        if send is not None:
            out.append(send)

    def delete(self, relay: Relay, now: float, out: list[Output]) -> None:
        outcome = Outcome()
        self.layer.delete(relay, outcome)
        self.apply(outcome, now, out)

    # ------------------------------------------------------------------------- receiving
    def _receive(self, src: NodeId, message: Message, now: float, out: list[Output]) -> None:
        name = type(message).__name__
        self.received[name] = self.received.get(name, 0) + 1
        if not self.started or src == self.node_id or type(src) is not int or src < 0:
            return
        if type(message) not in ROUTED and not isinstance(message, _LAYER_MESSAGES):
            return
        outcome = Outcome()
        self.layer.receive(src, message, now, outcome)
        self.frame_src = src
        self.apply(outcome, now, out)
        self.frame_src = -1

    def apply(self, outcome: Outcome, now: float, out: list[Output]) -> None:
        out.extend(outcome.sends)
        for relay in outcome.killed:
            for instance in self.instances.values():
                self._forget(instance, relay)
            if relay is self.bootstrap and self.contact is not None:
                self.bootstrap = self.layer.new_out(
                    None, (self.contact, PORT), self.contact, True, now
                )
        for delivery in outcome.deliveries:
            self._deliver_frame(delivery, now, out)
        for relay in outcome.nudged:
            self._on_nudge(relay, now, out)

    def _on_nudge(self, relay: Relay, now: float, out: list[Output]) -> None:
        """A leaver we point at has no relay to us (Nudge): introduce ourselves through our
        relay to it, so that it can ask us to reverse (see LeaveProtocol.nudge_holders)."""
        if type(relay.key) is not str:
            return
        instance = self.instances.get(relay.key)
        if instance is None or instance.leaving or instance.stopped or not instance.holds(relay):
            return
        self.send(relay, self.introduction(instance, instance.in_, self.node_id), now, out)

    @staticmethod
    def _forget(instance: Instance, relay: Relay) -> None:
        instance.n.pop(relay.rid, None)
        instance.d.pop(relay.rid, None)
        if instance.a_out is relay:
            instance.a_out = None

    def _deliver_frame(self, delivery: Delivery, now: float, out: list[Output]) -> None:
        """A group frame reached one of our IN relays: the PORT (Join, a non-member's Pub) or
        an instance's ``in`` / ``a_in``."""
        message, refs = delivery.message, delivery.refs
        topic = topic_of(message)
        instance = None
        if delivery.relay.rid == PORT:
            if topic is not None and (self.is_contact or topic in self.instances):
                instance = self.instances.get(topic)
                if instance is None and isinstance(message, Join) and self.is_contact:
                    instance = self._new_instance(topic, now, out)
        elif topic is not None:
            candidate = self.instances.get(topic)
            if candidate is not None and delivery.relay.key == topic and not candidate.stopped:
                instance = candidate
        if instance is None:
            for relay in refs.values():
                self.delete(relay, now, out)
            return
        instance.via_anchor = delivery.relay is instance.a_in and instance.a_in is not None
        self._dispatch(instance, message, refs, now, out)
        instance.via_anchor = False
        for relay in refs.values():
            if not instance.holds(relay):
                self.delete(relay, now, out)

    def _dispatch(
        self,
        instance: Instance,
        message: Message,
        refs: dict[str, Relay],
        now: float,
        out: list[Output],
    ) -> None:
        match message:
            case Join():
                u = refs.get("node")
                if u is not None:
                    self.build.on_join(self, instance, u, now, out)
                    if type(message) is JoinWithHistory:
                        self._serve_history(instance, u, message, now, out)
            case AskForIntro(introducer=introducer):
                u = refs.get("u")
                if u is not None:
                    self.build.on_ask_for_intro(self, instance, u, introducer, now, out)
            case Introduce(introducer=introducer):
                w = refs.get("w")
                if w is not None:
                    self.build.on_introduce(self, instance, w, introducer, now, out)
            case Feedback(target=target, new=new):
                self.build.on_feedback(self, instance, target, new)
            case AskToReverse():
                relay = refs.get("out")
                if relay is not None:
                    self.leave_protocol.on_ask_to_reverse(self, instance, relay, now, out)
            case Reverse():
                relay = refs.get("out")
                if relay is not None:
                    self.leave_protocol.on_reverse(self, instance, relay, now, out)
            case Pub():
                self._on_pub(instance, message, now, out)
            case Search():
                self._on_search(instance, message, now, out)
            case HistoryPub():
                self._on_history_pub(instance, message, now, out)
            case _:
                self._dispatch_more(instance, message, refs, now, out)

    def _dispatch_more(
        self,
        instance: Instance,
        message: Message,
        refs: dict[str, Relay],
        now: float,
        out: list[Output],
    ) -> None:
        """Group messages of a stack built on this one (d2g's AskForConnect and Connect)."""

    # --------------------------------------------------------------------- Build-Clique
    # the handlers and Timeout are the rules of ``self.build`` (BuildClique, build.py; d2g's
    # BuildD2G), handed this node as their RelayOps (ops.py)
    def introduction(self, instance: Instance, relay: Relay, introducer: NodeId) -> Introduce:
        """``Introduce(relay)`` for ``instance`` (RelayOps)."""
        return Introduce(
            topic=instance.topic,
            rid=0,
            prev=0,
            sink=0,
            direct=False,
            hop=0,
            w=self.layer.ref(relay),
            introducer=introducer,
        )

    # -------------------------------------------------------------------------- leaving
    # Leave and the reversal live in LeaveProtocol (leave.py)
    def leave_timeout(self, instance: Instance, now: float, out: list[Output]) -> None:
        """LeaveTimeout: :meth:`LeaveProtocol.leave_timeout` (RelayOps: the rules' Timeout
        calls it for a leaving instance)."""
        self.leave_protocol.leave_timeout(self, instance, now, out)

    def stop(self, instance: Instance, now: float, out: list[Output]) -> None:
        """stop (spec §3): every relay of the instance goes, then the instance."""
        instance.stopped = True
        for relay in instance.relays():
            self.delete(relay, now, out)
        instance.n.clear()
        instance.d.clear()
        instance.a_out = instance.a_in = None
        if self.instances.get(instance.topic) is instance:
            del self.instances[instance.topic]
        out.append(TraceRecord("clique.stopped", {"topic": instance.topic}))
        if instance.topic in self.wanted and not self.is_contact:
            # still subscribed (a corrupted leaving flag, or a resubscription while leaving):
            # a fresh instance joins again (spec §7)
            fresh = self._new_instance(instance.topic, now, out)
            self._join(fresh, now, out)

    # -------------------------------------------------------------------------- search
    def search(self, topic: str, sid: NodeId, now: float) -> list[Output]:
        """Start Search(sid) in our instance of ``topic`` (Scheideler's lecture §9.2 Search; spec
        §3): the node's own API, like ``handle`` it returns the outputs. Its outcome is a
        TraceRecord("clique.search", {origin, sid, found, hops}) where it ends."""
        out: list[Output] = []
        instance = self.instances.get(topic)
        if instance is None or instance.stopped or type(sid) is not int:
            out.append(
                TraceRecord(
                    "clique.search",
                    {"origin": self.node_id, "sid": sid, "found": False, "hops": 0},
                )
            )
            return out
        message = Search(
            topic=topic, rid=0, prev=0, sink=0, direct=False, hop=0,
            sid=sid, origin=self.node_id, d_left=self.params.search_d, hops=0,
        )  # fmt: skip
        self._on_search(instance, message, now, out)
        return out

    def _on_search(
        self, instance: Instance, message: Search, now: float, out: list[Output]
    ) -> None:
        """Search [P, R] (spec §3): found, or forwarded to a relay to the target, or at random
        at most d times."""
        sid = message.sid
        if sid == self.node_id:
            out.append(
                TraceRecord(
                    "clique.search",
                    {"origin": message.origin, "sid": sid, "found": True, "hops": message.hops},
                )
            )
            return
        target = next((r for r in instance.n.values() if r.sink == sid), None)
        if target is not None:
            self.send(target, _search(message, message.d_left, message.hops + 1), now, out)
        elif message.d_left > 0 and instance.n:
            rids = sorted(instance.n)
            relay = instance.n[rids[self.rng.randrange(len(rids))]]
            self.send(relay, _search(message, message.d_left - 1, message.hops + 1), now, out)
        else:
            out.append(
                TraceRecord(
                    "clique.search",
                    {"origin": message.origin, "sid": sid, "found": False, "hops": message.hops},
                )
            )

    # ------------------------------------------------------------------------- pub/sub
    def _publish(self, command: Publish, now: float, out: list[Output]) -> None:
        """spec §7: a member delivers and floods; a non-member publishes through the contact."""
        if not self.started or type(command.topic) is not str:
            return
        instance = self.instances.get(command.topic)
        if instance is None or instance.leaving:
            if self.bootstrap is not None:
                message = Pub(
                    topic=command.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
                    pub_id=command.pub_id, payload=command.payload, seen=frozenset(), hops=0,
                )  # fmt: skip
                self.send(self.bootstrap, message, now, out)
            elif instance is not None:
                self._flood(instance, command.pub_id, command.payload, frozenset(), 0, now, out)
            return
        instance.seen[command.pub_id] = now + self.params.dedup_ttl
        if self.is_contact:
            self._retain(command.topic, command.pub_id, command.payload, now)
        if instance.delivering:
            self.delivered += 1
            out.append(Deliver(command.topic, command.pub_id, command.payload, 0))
        self._flood(instance, command.pub_id, command.payload, frozenset(), 0, now, out)

    def _on_pub(self, instance: Instance, message: Pub, now: float, out: list[Output]) -> None:
        if type(message.pub_id) is not int or message.pub_id in instance.seen:
            self.count("duplicates")
            return
        instance.seen[message.pub_id] = now + self.params.dedup_ttl
        if self.is_contact:
            self._retain(instance.topic, message.pub_id, message.payload, now)
        hops = message.hops + message.hop
        if instance.delivering:
            self.delivered += 1
            out.append(Deliver(instance.topic, message.pub_id, message.payload, hops))
        seen = message.seen if isinstance(message.seen, frozenset) else frozenset()
        self._flood(instance, message.pub_id, message.payload, seen, hops, now, out)

    def _flood(
        self,
        instance: Instance,
        pub_id: int,
        payload: bytes,
        seen: frozenset[int],
        hops: int,
        now: float,
        out: list[Output],
    ) -> None:
        """spec §7: one relay per sink in N ∪ D ∪ {a_out} (direct preferred) not yet sent a
        copy; the copies name everyone sent one so far."""
        best: dict[NodeId, Relay] = {}
        candidates = [*instance.n.values(), *instance.d.values()]
        if instance.a_out is not None:
            candidates.append(instance.a_out)
        for relay in candidates:
            if relay.sink == self.node_id or relay.sink in seen:
                continue
            known = best.get(relay.sink)
            if known is None or relay.key_order() < known.key_order():
                best[relay.sink] = relay
        if not best:
            return
        reach = seen | {self.node_id} | set(best)
        if len(reach) > self.params.seen_cap:
            reach = frozenset()
        for sink in sorted(best):
            message = Pub(
                topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
                pub_id=pub_id, payload=payload, seen=frozenset(reach), hops=hops,
            )  # fmt: skip
            self.send(best[sink], message, now, out)

    # -------------------------------------------------------------------- topic history
    # not in the lecture (module essay, "Topic history"; docs/protocols/clique.md)
    def _retain(self, topic: str, pub_id: int, payload: Any, now: float) -> None:
        """The contact keeps a publication of ``topic`` for late subscribers."""
        p = self.params
        if p.history_count <= 0 or type(payload) is not bytes:
            return
        retention = self.retained.get(topic)
        if retention is None:
            retention = self.retained[topic] = Retention(
                p.history_count, p.history_seconds, p.history_bytes, topic, self.retained_journal
            )
        retention.add(pub_id, payload, now)

    def _serve_history(
        self, instance: Instance, u: Relay, message: JoinWithHistory, now: float, out: list[Output]
    ) -> None:
        """The contact answers a JoinWithHistory (after handling its Join part): through the
        relay ``u`` the Join gave it, one HistoryPub per retained publication the request
        covers, oldest first, at most ``history_items`` of them; at most once per
        ``history_interval`` per (topic, node); and only to the node that sent the Join, so
        that nobody can aim an answer at a third node."""
        p = self.params
        src = self.frame_src
        if not self.is_contact or p.history_count <= 0:
            return
        if u.next is None or u.next[0] != src or u.sink != src or message.hop != 1:
            self.count("history_refused")
            return
        topic = instance.topic
        if not self.history_answered.allow((topic, src), now, p.history_interval):
            self.count("history_over_limit")
            return
        count = message.count if type(message.count) is int and message.count > 0 else 0
        count = min(count, p.history_items) if count else p.history_items
        seconds = message.seconds if type(message.seconds) is float else 0.0
        retention = self.retained.get(topic)
        items = retention.select(count, max(seconds, 0.0), now) if retention is not None else []
        for item in items:
            reply = HistoryPub(
                topic=topic, rid=0, prev=0, sink=0, direct=False, hop=0,
                pub_id=item.pub_id, payload=item.payload, total=len(items), age=now - item.t,
            )  # fmt: skip
            self.send(u, reply, now, out)
        self.count("history_served")
        self.count("history_items_sent", len(items))

    def _on_history_pub(
        self, instance: Instance, message: HistoryPub, now: float, out: list[Output]
    ) -> None:
        """A member takes a publication of the contact's answer only while it waits for one
        (it asked, within ``history_wait``, still subscribed), straight from the contact, at
        most as many as it asked for; it goes through the duplicate filter (``seen``), so a
        live copy and a replayed copy make one delivery, and is not flooded on."""
        topic = instance.topic
        wait = self.waits.get(topic)
        if (
            wait is None
            or now > wait.until
            or wait.left <= 0
            or self.frame_src != self.contact
            or message.hop != 1
            or not instance.delivering
            or instance.leaving
            or topic not in self.wanted
            or type(message.pub_id) is not int
            or type(message.payload) is not bytes
        ):
            self.count("history_refused")
            return
        wait.left -= 1
        wait.got += 1
        if wait.total is None:
            wait.total = message.total if type(message.total) is int else 0
        if wait.left <= 0 or wait.got >= wait.total:
            del self.waits[topic]  # the whole answer, or all it asked for
        if message.pub_id in instance.seen:
            self.count("history_duplicates")
            return
        instance.seen[message.pub_id] = now + self.params.dedup_ttl
        self.delivered += 1
        age = item_age(message.age) if type(message.age) is float else 0.0
        out.append(Deliver(topic, message.pub_id, message.payload, 1, replayed=True, age=age))
        out.append(
            TraceRecord(
                "history.replayed",
                {"topic": topic, "pub_id": message.pub_id, "from": self.contact, "age": age},
            )
        )

    # --------------------------------------------------------------------------- timers
    def _tick(self, timer: GroupTick, now: float, out: list[Output]) -> None:
        instance = self.instances.get(timer.topic)
        if instance is None or instance.key != timer.key or instance.stopped:
            return
        wait = self.waits.get(timer.topic)
        if wait is not None and now > wait.until:
            del self.waits[timer.topic]  # the answer did not come (all of it) in time
        retention = self.retained.get(timer.topic)
        if retention is not None:
            retention.expire(now)
        self.build.timeout(self, instance, now, out)
        if instance.stopped:
            return
        out.append(SetTimer(self.params.timeout, GroupTick(instance.topic, instance.key)))
        for pub_id in [p for p, until in instance.seen.items() if until <= now]:
            del instance.seen[pub_id]
        # relay GC: ask the holders of relays that should go (spec §2.3)
        outcome = Outcome()
        due = [*instance.d.values(), *self.layer.zombies()]
        if instance.leaving:
            due.extend(instance.relays())
        self.layer.probe(due, now, outcome)
        self._probe_more(instance, now, outcome)
        self.apply(outcome, now, out)
        # rejoin through the contact (spec §7)
        if self.is_contact or instance.leaving or not self._rejoins():
            return
        if instance.n or instance.d:
            instance.empty_since = None
        elif instance.empty_since is None:
            instance.empty_since = now
        elif now - instance.empty_since >= self.params.rejoin_after * self.params.timeout:
            instance.empty_since = now
            self._join(instance, now, out)

    def _probe_more(self, instance: Instance, now: float, outcome: Outcome) -> None:
        """Relays a stack built on this one has probed besides D and zombies (d2g's ``in``)."""

    def _rejoins(self) -> bool:
        """Rejoin through the contact when N ∪ D stays empty (spec §7 [R])."""
        return True

    # -------------------------------------------------------------------------- queries
    def retentions(self) -> Iterable[Retention]:
        """The contact's retained publications per topic (module essay, "Topic history"):
        kept in a data directory across its lives."""
        return self.retained.values()

    def restore_retained(self, topic: str, item: Retained) -> None:
        checked_retained(item)
        self._retain(topic, item.pub_id, item.payload, item.t)

    def monitored_peers(self) -> Iterable[NodeId]:
        return sorted(self.layer.peers())

    def subscriptions(self) -> Iterable[str]:
        return sorted(t for t, i in self.instances.items() if i.delivering and not i.leaving)

    def snapshot(self) -> Iterable[SnapshotRow]:
        """spec §10.7: (topic, layer, N's sinks, {|N|, |D|, leaving, a_out sink, indeg})."""
        rows = []
        for topic in sorted(self.instances):
            instance = self.instances[topic]
            sinks = tuple(sorted({r.sink for r in instance.n.values()}))
            state: dict[str, Any] = {
                "n": len(instance.n),
                "d": len(instance.d),
                "leaving": instance.leaving,
                "a_out": instance.a_out.sink if instance.a_out is not None else None,
                "indeg": sum(instance.in_.holders.values()),
            }
            rows.append(SnapshotRow(topic, self.LAYER, sinks, state))
        return rows

    def statistics(self) -> NodeStatistics:
        return NodeStatistics(
            role=self.ctx.role,
            topics=tuple(self.subscriptions()),
            delivered=self.delivered,
            neighbors={
                t: tuple(sorted({r.sink for r in i.n.values()}))
                for t, i in sorted(self.instances.items())
            },
            received_by_type=dict(self.received),
            counters={**self.counters, **self.layer.counters},
        )


def _search(message: Search, d_left: int, hops: int) -> Search:
    return Search(
        topic=message.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
        sid=message.sid, origin=message.origin, d_left=d_left, hops=hops,
    )  # fmt: skip


def infrastructure(n: int, params: Any) -> dict[NodeId, str]:
    """Node 0 is the contact (spec §7)."""
    return {0: CONTACT}


def contacts(n: int, params: Any) -> tuple[NodeId, ...]:
    return (0,)


def create(ctx: NodeContext) -> StackNode:
    return CliqueNode(ctx)


__all__ = ["CliqueNode", "GroupTick", "Instance", "contacts", "create", "infrastructure"]
