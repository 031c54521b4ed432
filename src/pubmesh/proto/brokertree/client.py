"""The brokertree client's side (Kazemzadeh & Jacobsen, *Highly Available Distributed
Publish/Subscribe Systems* §3.1, §6, §7; docs/protocols/brokertree.md §3, §6, §9): its own
subscriptions, what it publishes, the subscribers around it that TopoSummary names, and
delivery with the per-publisher high-water mark and the partial-subscription tags of Lemma 3.

A part of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode`; a broker's is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pubmesh.proto.brokertree.checkout import PUB, SUB, UNSUB
from pubmesh.proto.brokertree.messages import OriginT, ParInfoT, Pub, SeqT, Sub, TopoSummary, Unsub
from pubmesh.proto.brokertree.state import LEAVING, RUNNING
from pubmesh.proto.brokertree.wire import norm_seq, valid_node, valid_parinfo
from pubmesh.proto.content import (
    Conjunction,
    FilterError,
    matches,
    publication_attributes,
    validate,
    with_topic,
)
from pubmesh.proto.core import Deliver, NodeId, Output, Part, Publish, TraceRecord

if TYPE_CHECKING:
    from pubmesh.proto.brokertree.node import BrokerTreeNode

__all__ = ["Client", "OwnSub"]


@dataclass(slots=True)
class OwnSub:
    """A subscription this client issued: its origin, topic, filter and predicate."""

    origin: OriginT
    topic: str
    filter: dict[str, Any]
    pred: Conjunction
    confirmed: bool = False
    parinfo: frozenset[ParInfoT] = frozenset()


class Client(Part["BrokerTreeNode"]):
    """A client's subscriptions, publications and deliveries (module docstring)."""

    __slots__ = ("delivered", "last", "own", "targets")

    def __init__(self, node: BrokerTreeNode) -> None:
        super().__init__(node)
        #: a client's own subscriptions by topic
        self.own: dict[str, OwnSub] = {}
        #: a client's subscriber clients within δ + 1 hops (TopoSummary), recipients of its
        #: publications beside the broker frontier
        self.targets: set[NodeId] = set()
        #: safety net (spec §6.5): highest pseq delivered per publisher
        self.last: dict[NodeId, SeqT] = {}
        self.delivered = 0

    def subscribe(
        self, topic: str, filter: Mapping[str, Any] | None, now: float, out: list[Output]
    ) -> None:
        """A client subscribes (Kazemzadeh & Jacobsen §3.1): a Sub with its own number as origin."""
        if self.n.state != RUNNING or self.n.is_broker:
            return
        if topic.startswith("$"):
            out.append(TraceRecord("brokertree.bad_topic", {"topic": topic}))
            return
        try:
            plain = dict(filter or {})
            pred = with_topic(validate(plain), topic)
        except (FilterError, TypeError, ValueError) as error:
            out.append(TraceRecord("brokertree.bad_filter", {"topic": topic, "error": str(error)}))
            return
        old = self.own.get(topic)
        if old is not None:
            if old.pred == pred:
                return
            self.unsubscribe(topic, now, out)
        origin = (self.n.node_id, self.n.next_seq())
        self.own[topic] = OwnSub(origin, topic, plain, pred)
        message = Sub(sid=0, n=0, origin=origin, topic=topic, filter=plain, vect=())
        rcpt = self.n.view.frontier_except(()) if self.n.view is not None else frozenset()
        self.n.flow.enqueue(SUB, origin, message, (), rcpt, set(), now, lseq=origin[1])

    def unsubscribe(self, topic: str, now: float, out: list[Output]) -> None:
        """spec §9: an Unsub travels like a Sub and removes the tuple where confirmed."""
        if self.n.state not in (RUNNING, LEAVING) or self.n.is_broker:
            return
        own = self.own.pop(topic, None)
        if own is None or self.n.view is None:
            return
        self.n.history.unsubscribe(topic, out)
        origin = (self.n.node_id, self.n.next_seq())
        message = Unsub(sid=0, n=0, origin=origin, target=own.origin, vect=())
        self.n.flow.enqueue(
            UNSUB, origin, message, (), self.n.view.frontier_except(()), set(), now, lseq=origin[1]
        )
        self.n.tombstones[own.origin] = now + self.n.params.tombstone_ttl

    def publish(self, command: Publish, now: float, out: list[Output]) -> None:
        """A client publishes (spec §6.2): its recipients are the brokers at the edge of its
        map, which filter (``client_tables = "broker"``, Kazemzadeh & Jacobsen fn. 7)."""
        if self.n.state != RUNNING or self.n.is_broker or self.n.view is None:
            return
        if command.topic.startswith("$"):
            out.append(TraceRecord("brokertree.bad_topic", {"topic": command.topic}))
            return
        attributes = dict(command.attributes or {})
        origin = (self.n.node_id, self.n.next_seq())
        message = Pub(
            sid=0,
            n=0,
            origin=origin,
            pub_id=command.pub_id,
            topic=command.topic,
            attributes=attributes,
            payload=command.payload,
            vect=(),
            hops=0,
            tags=(),
        )
        self.n.history.retain(
            command.topic, command.pub_id, command.payload, attributes, origin[1], now
        )
        self.deliver(origin, message, publication_attributes(attributes, command.topic), out)
        # the broker frontier filters for everyone beyond; the subscriber clients around us go
        # through our broker too while it is up, and straight to them while it is down
        rcpt = self.n.view.frontier_except(()) | frozenset(self.targets)
        self.n.flow.enqueue(PUB, origin, message, (), rcpt, set(), now, lseq=origin[1])

    def deliver(
        self, origin: OriginT, message: Pub, attributes: Mapping[str, Any], out: list[Output]
    ) -> None:
        """spec §6.5: a subscriber delivers the first copy that matches its subscription; the
        per-publisher high-water mark drops anything at or below what it delivered (``late``,
        which must never fire under ≤ δ failures)."""
        own = self.own.get(message.topic)
        if own is None or not matches(own.pred, attributes):
            if origin[0] != self.n.node_id:
                self.n.count("unmatched")
            return
        publisher, pseq = origin
        if self.n.history.seen(message.topic, message.pub_id):
            # delivered already from the topic's history (spec §14): one delivery
            self.n.count("history_duplicates")
            return
        tagged = self.read_tags(own, message)
        last = self.last.get(publisher)
        if last is not None and pseq <= last:
            self.n.count("late")
            out.append(
                TraceRecord("brokertree.late", {"pub_id": message.pub_id, "publisher": publisher})
            )
            return
        self.last[publisher] = pseq
        if tagged:
            # delivered through an overlap with other subscriptions while this one is
            # partial: earlier matching publications may be missing (Kazemzadeh & Jacobsen §7)
            self.n.count("tagged")
            detail = {"pub_id": message.pub_id, "parinfo": [repr(pi) for pi in tagged]}
            out.append(TraceRecord("brokertree.tagged", detail))
        deliver = Deliver(
            message.topic,
            message.pub_id,
            message.payload,
            message.hops,
            dict(message.attributes),
        )
        if self.n.history.hold(message.topic, publisher, pseq, deliver):
            return  # held until the topic's history is in (spec §14)
        self.delivered += 1
        out.append(deliver)

    def read_tags(self, own: OwnSub, message: Pub) -> list[ParInfoT]:
        """Lemma 3: a tag π matching a partial subscription's π marks the publication; the
        first π̄ clears π for good."""
        if not own.parinfo or not message.tags:
            return []
        pending = {(pi[0], pi[1]): pi for pi in own.parinfo}
        tagged: list[ParInfoT] = []
        for tag in message.tags:
            if not valid_parinfo(tag):
                continue
            key = (tag[0], norm_seq(tag[1]))
            if key not in pending:
                continue
            if tag[3]:
                del pending[key]
            else:
                tagged.append(pending[key])
        own.parinfo = frozenset(pending.values())
        return tagged

    def on_topo(self, message: TopoSummary) -> None:
        """A client learns the subscribers around it (spec §3)."""
        view = self.n.view
        if view is None or self.n.is_broker:
            return
        for edge in message.edges:
            if type(edge) is not tuple or len(edge) != 2:
                continue
            client, broker = edge
            if not (valid_node(client) and valid_node(broker)) or view.is_broker(client):
                continue
            if client == self.n.node_id or view.attach(client) != broker:
                continue
            if view.dist(client) <= view.reach:
                view.learn_client(client)
                self.targets.add(client)
