"""A subscriber: one BuildSR instance per topic plus the publication layer (Feldmann et al. §3.2,
§4).

How it works
============
The node is a thin router over two layers per topic, each with one ``handle(event, now)``:
the ring layer :class:`.ring.TopicState` (BuildRing, shortcuts, configurations; inputs: its
messages, ``RingTimeout``, ``ConfigurationReceived``) and the publication layer
:class:`.publications.PublicationLayer` (CheckTrie, flooding; inputs: its messages,
``PublishLocal``, ``CheckTick``). Every message names a topic; the node hands it to that
topic's layer (on the hot path through the functions ``handle`` itself calls,
:meth:`.ring.TopicState.receive` and ``timeout``, :func:`.publications.receive` and
``start_check``, without the input wrappers). One periodic timer (``Timeout``) runs the
Timeout action of every topic instance in topic order:

1. actions (i), (ii), (iv) of §3.2.1: ask the supervisor for a configuration if the label is
   ⊥, with probability p(|label|) = 4^-|label|, or with probability q if the node has no left
   neighbour (its local state says its label is minimal);
2. the extended BuildRing Timeout (closing edge, label checks of both neighbours);
3. shortcut labels recomputed and the two level-|label| neighbours introduced to each other;
4. CheckTrie with a random ring neighbour.

Subscribing sends one ``SubscribeRequest``; unsubscribing sends ``UnsubscribeRequest`` and keeps
serving the ring until the supervisor's permission (a configuration with label ⊥) arrives. A
node without a label, or that does not run a topic at all, answers every introduction with
``RemoveConnection`` and hands references it cannot place back to the sender, so it ends up
disconnected without cutting anyone else off (§4.1, Lemma "eventually v gets disconnected").

The one rule that keeps it correct: **the supervisor is the only authority on labels.** A
subscriber takes its label only from a ``Configuration`` sent by the supervisor (whose address
is hard-coded, Feldmann et al. §1.1), and takes part in a topic only while the application wants it
to: a configuration for a topic it does not want is answered with an unsubscribe, so neither a
corrupted database nor a junk message can keep it in a ring.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pubmesh.proto.core import (
    Deliver,
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
    Unsubscribe,
    topic_of,
)
from pubmesh.proto.skipring import publications
from pubmesh.proto.skipring.labels import is_label, request_probability
from pubmesh.proto.skipring.messages import (
    Check,
    CheckAndPublish,
    CheckTrie,
    Configuration,
    IntroduceRing,
    IntroduceShortcut,
    LabelCorrection,
    Linearize,
    PublicationTransfer,
    PublishNew,
    PublishRelay,
    RemoveConnection,
    SubscribeRequest,
    UnsubscribeRequest,
)
from pubmesh.proto.skipring.params import SkipRingParams
from pubmesh.proto.skipring.patricia import Publication
from pubmesh.proto.skipring.publications import (
    PUBLICATION_MESSAGES,
    PublicationLayer,
    PublishLocal,
)
from pubmesh.proto.skipring.ring import (
    RING_MESSAGES,
    ConfigurationReceived,
    Ref,
    Status,
    TopicState,
)


@dataclass(frozen=True, slots=True)
class Timeout(Timer):
    """The subscriber's periodic Timeout action (Feldmann et al. §3.2.1, §4.2)."""


#: the ring's messages a subscriber gets most (a delegated reference, a check), by exact
#: class: :meth:`Subscriber._receive` skips its tests for a configuration, a RemoveConnection
#: and the supervisor's messages for them, which none of them is
_PLAIN_RING: frozenset[type[Message]] = frozenset(
    {Check, Linearize, IntroduceRing, LabelCorrection, IntroduceShortcut}
)


class Subscriber(StackNode):
    """A subscriber node of the skipring stack."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: SkipRingParams = ctx.params if ctx.params is not None else SkipRingParams()
        #: the supervisor's hard-coded address (the first contact handed in Start)
        self.supervisor: NodeId = 0
        #: topic -> BuildSR instance (subscribed, leaving, or departed and not yet released)
        self.topics: dict[str, TopicState] = {}
        self.counters: dict[str, int] = {
            "timeouts": 0,
            "configurations": 0,
            "remove_connections_sent": 0,
            "released": 0,
            "relayed_publications": 0,
        }
        self.delivered = 0
        self.received_by_type: dict[str, int] = {}

    # ------------------------------------------------------------------ the entry point
    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Receive(src=src, message=message):
                name = type(message).__name__
                self.received_by_type[name] = self.received_by_type.get(name, 0) + 1
                self._receive(src, message, now, out)
            case TimerFired(timer=Timeout()):
                self._timeout(now, out)
                out.append(SetTimer(self.params.timeout_interval, Timeout()))
            case PeerDown(peer=peer):
                # only sends of ours that failed come here (we monitor nobody)
                if self.params.drop_unreachable:
                    for topic in sorted(self.topics):
                        self.topics[topic].forget(peer)
            case Start(contacts=contacts):
                if contacts:
                    self.supervisor = contacts[0]
                first = self.rng.uniform(0.0, self.params.timeout_interval)
                out.append(SetTimer(first, Timeout()))
            case Subscribe(topic=topic):
                self._subscribe(topic, out)
            case Unsubscribe(topic=topic):
                self._unsubscribe(topic, out)
            case Leave():
                for topic in sorted(self.topics):
                    self._unsubscribe(topic, out)
            case Publish(topic=topic, pub_id=pub_id, payload=payload):
                self._publish(topic, pub_id, payload, now, out)
        return self._counted(out)

    def receive(self, src: NodeId, message: Message, now: float) -> list[Output]:
        """:meth:`handle` of a Receive, without the wrapper (the simulator's hot path)."""
        out: list[Output] = []
        name = type(message).__name__
        self.received_by_type[name] = self.received_by_type.get(name, 0) + 1
        self._receive(src, message, now, out)
        return self._counted(out)

    def fire(self, timer: Timer, now: float) -> list[Output]:
        """:meth:`handle` of a TimerFired, without the wrapper (the simulator's hot path)."""
        if not isinstance(timer, Timeout):
            return []
        out: list[Output] = []
        self._timeout(now, out)
        out.append(SetTimer(self.params.timeout_interval, Timeout()))
        return self._counted(out)

    def _counted(self, out: list[Output]) -> list[Output]:
        for item in out:
            if type(item) is Deliver:
                self.delivered += 1
        return out

    # ------------------------------------------------------------------ commands
    def _subscribe(self, topic: str, out: list[Output]) -> None:
        state = self.topics.get(topic)
        if state is not None and state.status is Status.ACTIVE:
            return
        if state is not None:
            self._disconnect_all(state, out)
        self.topics[topic] = TopicState(topic, self.node_id, self.supervisor)
        out.append(Send(self.supervisor, SubscribeRequest(topic=topic)))

    def _unsubscribe(self, topic: str, out: list[Output]) -> None:
        state = self.topics.get(topic)
        if state is None or state.status is not Status.ACTIVE:
            return
        state.status = Status.LEAVING
        state.quiet = 0
        out.append(Send(self.supervisor, UnsubscribeRequest(topic=topic)))

    def _publish(
        self, topic: str, pub_id: int, payload: bytes, now: float, out: list[Output]
    ) -> None:
        """Publish (§4.2, §4.3): insert into the own trie, deliver, flood. A node that does not
        subscribe to the topic hands the publication to the supervisor instead."""
        publication = Publication(pub_id, self.node_id, payload)
        state = self.topics.get(topic)
        if state is None or state.status is not Status.ACTIVE:
            self.counters["relayed_publications"] += 1
            relay = PublishRelay(
                topic=topic, pub_id=pub_id, publisher=self.node_id, payload=payload
            )
            out.append(Send(self.supervisor, relay))
            return
        out.extend(self._publications(state).handle(PublishLocal(publication), now))

    # ------------------------------------------------------------------ Timeout
    def _publications(self, state: TopicState) -> PublicationLayer:
        return PublicationLayer(state, self.rng, self.params.flooding)

    def _timeout(self, now: float, out: list[Output]) -> None:
        self.counters["timeouts"] += 1
        params = self.params
        for topic in sorted(self.topics):
            state = self.topics[topic]
            if state.label is not None and not is_label(state.label):
                state.label = None  # a label outside the image of l counts as ⊥ (spec §10.2)
            if state.status is Status.DEPARTED:
                self._disconnect_all(state, out)
                state.quiet += 1
                if state.quiet >= params.release_after:
                    del self.topics[topic]
                    self.counters["released"] += 1
                continue
            if state.status is Status.LEAVING:
                state.quiet += 1
                if state.quiet >= 2:  # no permission for a whole interval: ask again
                    state.quiet = 0
                    out.append(Send(self.supervisor, UnsubscribeRequest(topic=topic)))
            if state.label is None:
                # Timeout with label ⊥ (spec §3): drop every neighbour, then action (i)
                self._disconnect_all(state, out)
                if state.status is Status.ACTIVE:
                    state.request(self.node_id, 1, out)
                continue
            p = request_probability(state.label, params.request_base)
            draw = self.rng.random() if state.status is Status.ACTIVE else None
            # TopicState.handle of a RingTimeout, PublicationLayer.handle of a CheckTick
            state.timeout(p, params.minimal_request_probability, draw, out)
            if params.anti_entropy:
                publications.start_check(state, self.rng, out)

    def _disconnect_all(self, state: TopicState, out: list[Output]) -> None:
        """Send RemoveConnection to every node the instance refers to and forget them all."""
        message = RemoveConnection(topic=state.topic, node=self.node_id)
        for node in state.neighbours():
            out.append(Send(node, message))
            self.counters["remove_connections_sent"] += 1
        state.left = state.right = state.ring = None
        state.shortcuts = {}

    # ------------------------------------------------------------------ messages
    def _receive(self, src: NodeId, message: Message, now: float, out: list[Output]) -> None:
        topic = topic_of(message)
        if topic is None:
            return
        state = self.topics.get(topic)
        plain = type(message) in _PLAIN_RING  # none of the three cases below
        if not plain:
            if isinstance(message, Configuration):
                if src == self.supervisor:
                    self._configuration(state, message, now, out)
                return
            if isinstance(message, RemoveConnection):
                if state is not None:
                    out.extend(state.handle(Receive(src, message), now))
                return
            if isinstance(message, SubscribeRequest | UnsubscribeRequest | PublishRelay):
                return  # meant for the supervisor: junk here
        if state is None:
            # a topic this node does not run: ask the sender to forget it (testbed behaviour)
            if not isinstance(message, PublicationTransfer):
                self._remove_me(topic, src, out)
            return
        state.quiet = 0
        if state.label is None or state.status is Status.DEPARTED:
            self._without_label(state, src, message, now, out)
            return
        # (a RemoveConnection, a ring message too, was handled above)
        if plain or isinstance(message, RING_MESSAGES):
            state.receive(src, message, out)  # TopicState.handle of a Receive
        elif isinstance(message, PUBLICATION_MESSAGES):
            # PublicationLayer.handle of a Receive
            publications.receive(state, src, message, out, flooding=self.params.flooding)

    def _remove_me(self, topic: str, dst: NodeId, out: list[Output]) -> None:
        if dst != self.node_id:
            out.append(Send(dst, RemoveConnection(topic=topic, node=self.node_id)))
            self.counters["remove_connections_sent"] += 1

    def _without_label(
        self, state: TopicState, src: NodeId, message: Message, now: float, out: list[Output]
    ) -> None:
        """A node with label ⊥ is in no ring: it answers introductions with RemoveConnection
        (§4.1) and sends references it was handed back to the sender once, so they are not
        lost. Publications still reach a joining subscriber's trie."""
        topic = state.topic
        match message:
            case Check(node=node):
                self._remove_me(topic, node, out)
            case Linearize(node=node, label=label, returned=returned):
                self._remove_me(topic, src, out)
                if not returned and node != src:
                    back = Linearize(topic=topic, node=node, label=label, returned=True)
                    out.append(Send(src, back))
            case IntroduceRing(node=node, label=label, returned=returned):
                self._remove_me(topic, src, out)
                if not returned and node != src:
                    back_ring = IntroduceRing(topic=topic, node=node, label=label, returned=True)
                    out.append(Send(src, back_ring))
            case IntroduceShortcut():
                self._remove_me(topic, src, out)
            case PublishNew() | PublicationTransfer() if state.status is Status.ACTIVE:
                # no label, so no ring to flood over: the publication goes into the trie only
                publication = Publication(message.pub_id, message.publisher, message.payload)
                publications.accept(state, publication, message.hops, out)
            case CheckTrie() | CheckAndPublish() if state.status is Status.ACTIVE:
                out.extend(self._publications(state).handle(Receive(src, message), now))
            case _:
                self._remove_me(topic, src, out)

    def _configuration(
        self, state: TopicState | None, message: Configuration, now: float, out: list[Output]
    ) -> None:
        """ReceiveConfiguration from the supervisor (§3.1, §4.1)."""
        self.counters["configurations"] += 1
        topic = message.topic
        if message.label is None:
            # permission to leave, or the supervisor does not (any more) record us
            if state is None:
                return
            if state.status is Status.LEAVING:
                state.status = Status.DEPARTED
                state.quiet = 0
            state.label = None
            return
        if not is_label(message.label):
            return
        if state is None or state.status is Status.DEPARTED:
            # recorded for a topic we do not want: have the supervisor remove us
            out.append(Send(self.supervisor, UnsubscribeRequest(topic=topic)))
            return
        pred = succ = None
        if message.pred is not None and is_label(message.pred_label):
            assert message.pred_label is not None
            pred = Ref(message.pred_label, message.pred)
        if message.succ is not None and is_label(message.succ_label):
            assert message.succ_label is not None
            succ = Ref(message.succ_label, message.succ)
        out.extend(state.handle(ConfigurationReceived(message.label, pred, succ), now))

    # ------------------------------------------------------------------ queries
    def monitored_peers(self) -> Iterable[NodeId]:
        """Nobody: the failure detector lives at the supervisor only (Feldmann et al. §3.3)."""
        return ()

    def subscriptions(self) -> Iterable[str]:
        return sorted(t for t, s in self.topics.items() if s.status is Status.ACTIVE)

    def snapshot(self) -> Iterable[SnapshotRow]:
        rows = []
        for topic in sorted(self.topics):
            state = self.topics[topic]
            info = {"label": state.label, "status": state.status.value}
            rows.append(SnapshotRow(topic, "ring", tuple(state.ring_nodes()), info))
            rows.append(SnapshotRow(topic, "shortcut", tuple(state.shortcut_nodes()), info))
        return rows

    def statistics(self) -> NodeStatistics:
        requests = [0, 0, 0, 0, 0]
        for state in self.topics.values():
            for action in range(1, 5):
                requests[action] += state.config_requests[action]
        counters = dict(self.counters)
        counters["topics"] = len(self.topics)
        for action in range(1, 5):
            counters[f"config_requests_{'i' * action if action < 4 else 'iv'}"] = requests[action]
        counters["stored_publications"] = sum(len(s.trie) for s in self.topics.values())
        return NodeStatistics(
            role=self.ctx.role,
            topics=tuple(self.subscriptions()),
            delivered=self.delivered,
            neighbors={
                topic: tuple(sorted({*state.ring_nodes(), *state.shortcut_nodes()}))
                for topic, state in sorted(self.topics.items())
            },
            received_by_type=dict(sorted(self.received_by_type.items())),
            counters=counters,
        )
