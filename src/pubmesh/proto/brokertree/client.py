"""The brokertree client's side (Kazemzadeh & Jacobsen, *Highly Available Distributed
Publish/Subscribe Systems* §3.1, §6, §7; docs/protocols/brokertree.md §3, §6, §9): its own
subscriptions, what it publishes, the subscribers around it that TopoSummary names, and
delivery with the per-publisher high-water mark and the partial-subscription tags of Lemma 3.

A part of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode`; a broker's is empty. Its
subscriptions and delivery marks are the node's :class:`~.shared.TreeState` (the topic
history delivers too); what it makes goes to the queue and the history as effects
(:class:`~.shared.Enqueue`, :class:`~.shared.Retain`, :class:`~.shared.DeliverOwn`,
:class:`~.shared.Unsubscribed`), and the node, which owns delivery, asks it which
subscription a copy matches (:meth:`Client.matching`) and whether it is delivered
(:meth:`Client.accept`) around the history's own checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pubmesh.proto.brokertree.checkout import PUB, SUB, UNSUB
from pubmesh.proto.brokertree.messages import OriginT, ParInfoT, Pub, Sub, TopoSummary, Unsub
from pubmesh.proto.brokertree.shared import (
    DeliverOwn,
    Enqueue,
    OwnSub,
    Retain,
    TreeOut,
    TreeState,
    Unsubscribed,
)
from pubmesh.proto.brokertree.state import LEAVING, RUNNING
from pubmesh.proto.brokertree.wire import norm_seq, valid_node, valid_parinfo
from pubmesh.proto.content import (
    FilterError,
    matches,
    publication_attributes,
    validate,
    with_topic,
)
from pubmesh.proto.core import Deliver, NodeId, Publish, TraceRecord

__all__ = ["Client"]


class Client:
    """A client's subscriptions, publications and deliveries (module docstring)."""

    __slots__ = ("s", "targets")

    def __init__(self, s: TreeState) -> None:
        self.s = s
        #: a client's subscriber clients within δ + 1 hops (TopoSummary), recipients of its
        #: publications beside the broker frontier
        self.targets: set[NodeId] = set()

    def subscribe(
        self, topic: str, filter: Mapping[str, Any] | None, now: float, out: TreeOut
    ) -> None:
        """A client subscribes (Kazemzadeh & Jacobsen §3.1): a Sub with its own number as origin."""
        if self.s.phase != RUNNING or self.s.is_broker:
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
        old = self.s.own.get(topic)
        if old is not None:
            if old.pred == pred:
                return
            self.unsubscribe(topic, now, out)
        origin = (self.s.node_id, self.s.next_seq())
        self.s.own[topic] = OwnSub(origin, topic, plain, pred)
        message = Sub(sid=0, n=0, origin=origin, topic=topic, filter=plain, vect=())
        rcpt = self.s.view.frontier_except(()) if self.s.view is not None else frozenset()
        out.route(Enqueue(SUB, origin, message, rcpt))

    def unsubscribe(self, topic: str, now: float, out: TreeOut) -> None:
        """spec §9: an Unsub travels like a Sub and removes the tuple where confirmed."""
        if self.s.phase not in (RUNNING, LEAVING) or self.s.is_broker:
            return
        own = self.s.own.pop(topic, None)
        if own is None or self.s.view is None:
            return
        out.route(Unsubscribed(topic))
        origin = (self.s.node_id, self.s.next_seq())
        message = Unsub(sid=0, n=0, origin=origin, target=own.origin, vect=())
        out.route(Enqueue(UNSUB, origin, message, self.s.view.frontier_except(())))
        self.s.tombstones[own.origin] = now + self.s.params.tombstone_ttl

    def publish(self, command: Publish, now: float, out: TreeOut) -> None:
        """A client publishes (spec §6.2): its recipients are the brokers at the edge of its
        map, which filter (``client_tables = "broker"``, Kazemzadeh & Jacobsen fn. 7)."""
        if self.s.phase != RUNNING or self.s.is_broker or self.s.view is None:
            return
        if command.topic.startswith("$"):
            out.append(TraceRecord("brokertree.bad_topic", {"topic": command.topic}))
            return
        attributes = dict(command.attributes or {})
        origin = (self.s.node_id, self.s.next_seq())
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
        out.route(Retain(command.topic, command.pub_id, command.payload, attributes, origin[1]))
        out.route(DeliverOwn(origin, message, publication_attributes(attributes, command.topic)))
        # the broker frontier filters for everyone beyond; the subscriber clients around us go
        # through our broker too while it is up, and straight to them while it is down
        rcpt = self.s.view.frontier_except(()) | frozenset(self.targets)
        out.route(Enqueue(PUB, origin, message, rcpt))

    def matching(
        self, origin: OriginT, message: Pub, attributes: Mapping[str, Any]
    ) -> OwnSub | None:
        """spec §6.5: the subscription a copy is delivered for, if it matches one (a copy of
        another's publication that matches none is counted ``unmatched``)."""
        own = self.s.own.get(message.topic)
        if own is None or not matches(own.pred, attributes):
            if origin[0] != self.s.node_id:
                self.s.count("unmatched")
            return None
        return own

    def accept(self, own: OwnSub, origin: OriginT, message: Pub, out: TreeOut) -> Deliver | None:
        """spec §6.5: the first copy that matches ``own`` is delivered; the per-publisher
        high-water mark drops anything at or below what it delivered (``late``, which must
        never fire under ≤ δ failures). Lemma 3's tags are read first."""
        publisher, pseq = origin
        tagged = self.read_tags(own, message)
        last = self.s.last.get(publisher)
        if last is not None and pseq <= last:
            self.s.count("late")
            out.append(
                TraceRecord("brokertree.late", {"pub_id": message.pub_id, "publisher": publisher})
            )
            return None
        self.s.last[publisher] = pseq
        if tagged:
            # delivered through an overlap with other subscriptions while this one is
            # partial: earlier matching publications may be missing (Kazemzadeh & Jacobsen §7)
            self.s.count("tagged")
            detail = {"pub_id": message.pub_id, "parinfo": [repr(pi) for pi in tagged]}
            out.append(TraceRecord("brokertree.tagged", detail))
        return Deliver(
            message.topic,
            message.pub_id,
            message.payload,
            message.hops,
            dict(message.attributes),
        )

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
        view = self.s.view
        if view is None or self.s.is_broker:
            return
        for edge in message.edges:
            if type(edge) is not tuple or len(edge) != 2:
                continue
            client, broker = edge
            if not (valid_node(client) and valid_node(broker)) or view.is_broker(client):
                continue
            if client == self.s.node_id or view.attach(client) != broker:
                continue
            if view.dist(client) <= view.reach:
                view.learn_client(client)
                self.targets.add(client)
