"""Publish and routing of a chord node: a publication or maintenance notification goes down
the publisher's binomial tree, each edge getting its part of the range if its filter matches
(Terpstra et al. §4.3, §5.1; spec §5).

:class:`ChordPublisher` is one part of :class:`~pubmesh.proto.chord.node.ChordNode` (its module
doc tells how the parts work together). It owns the queue of publications issued while the
node is still joining; it routes over the edges and by the edge filters of the node's
:class:`~.shared.ChordState` (the ring and the filters write them). A copy its node's
subscription matches is a :class:`~.shared.DeliverHere` (the node asks the history whether
it was replayed), its own publication a :class:`~.shared.Retain` for the history, and a
notification reaching a joined node a :class:`~.shared.NotificationHere` for the joins.
Unlike the ring and the filters it is kept across a rejoin.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pubmesh.proto.chord.keys import MASK, SIZE, dist
from pubmesh.proto.chord.life import IDLE, JOINED, JOINING, LEAVING, LEFT
from pubmesh.proto.chord.messages import ChordHistoryQuery, Notification, Publication
from pubmesh.proto.chord.routing import match_attributes, matches_any
from pubmesh.proto.chord.shared import (
    ChordOut,
    ChordState,
    DeliverHere,
    NotificationHere,
    Retain,
)
from pubmesh.proto.content import matches, publication_attributes
from pubmesh.proto.core import Deliver, Publish, Send, TraceRecord


class ChordPublisher:
    """Publish and routing of one chord node (module doc)."""

    def __init__(self, s: ChordState) -> None:
        self.s = s
        #: publications issued while joining, sent once joined
        self.queue: list[Publish] = []

    def publish(self, command: Publish, out: ChordOut) -> None:
        """Publish (spec §5): queued while there is no successor yet, then processed with
        R = K "as if received via the loopback edge" (Terpstra et al. §4.3)."""
        s = self.s
        if s.phase in (LEAVING, LEFT, IDLE):
            return
        if command.topic.startswith("$"):
            out.append(TraceRecord("chord.bad_topic", {"topic": command.topic}))
            return
        if s.phase == JOINING:
            if len(self.queue) < s.params.queue_limit:
                self.queue.append(command)
            else:
                out.append(TraceRecord("chord.queue_full", {"pub_id": command.pub_id}))
            return
        attributes = dict(command.attributes or {})
        # the publisher's own cache for late subscribers (spec §14)
        out.route(Retain(command.topic, command.pub_id, command.payload, attributes))
        publication = Publication(
            topic=command.topic,
            pub_id=command.pub_id,
            payload=command.payload,
            attributes=attributes,
            end=self.s.key,
            hops=0,
        )
        self._forward_publication(publication, match_attributes(attributes) or {}, None, out)

    def flush_queue(self, out: ChordOut) -> None:
        queued, self.queue = self.queue, []
        for command in queued:
            self.publish(command, out)

    def _forward_publication(
        self,
        message: Publication,
        attributes: Mapping[str, Any],
        end: int | None,
        out: ChordOut,
    ) -> None:
        """Deliver locally if u's own subscription to the topic matches (§4.3: u is the only
        node with key in r_u(u)), then forward down the tree."""
        s = self.s
        matched = publication_attributes(attributes, message.topic)
        conj = s.subs.get(message.topic)
        if conj is not None and matches(conj, matched):
            deliver = Deliver(
                message.topic, message.pub_id, message.payload, message.hops, message.attributes
            )
            out.route(DeliverHere(deliver))  # delivered unless it was replayed already (§14)
        self._route(matched, message, end, out)

    def _forward_notification(
        self,
        message: Notification,
        attributes: Mapping[str, Any],
        end: int | None,
        out: ChordOut,
    ) -> None:
        """Act on a maintenance notification here (if joined), then forward it exactly as a
        publication (Terpstra et al. §5.1: notifications use the publish mechanism)."""
        matched = dict(attributes)
        matched["$topic"] = message.topic
        if self.s.phase == JOINED:
            out.route(NotificationHere(message.topic, matched))
        self._route(matched, message, end, out)

    def route_query(self, query: ChordHistoryQuery, end: int | None, out: ChordOut) -> None:
        """Forward a history query over the range R = [key(u), end) (K when ``end`` is None)
        to every edge, unpruned (spec §14): it reaches every node once."""
        self._route(None, query, end, out)

    def _route(
        self,
        attributes: Mapping[str, Any] | None,
        message: Publication | Notification | ChordHistoryQuery,
        end: int | None,
        out: ChordOut,
    ) -> None:
        """Forward over the edges of the range R = [key(u), end) (K when ``end`` is None):
        each edge v with d(u,v) < |R| whose filter matches gets a copy of ``message`` with
        [key(v), key(v) + min(|r_u(v)|, |R| − d(u,v))) and one more hop, in decreasing range
        size (Terpstra et al. §4.3). ``attributes`` None: every edge (no filter pruning)."""
        s = self.s
        edge_filter = s.edge_filter
        size = SIZE if end is None else dist(self.s.key, end)
        for v in s.order:
            offset = s.d(v)
            if offset >= size:
                continue
            length = min(dist(s.key_of(v), s.ends[v]) or SIZE, size - offset)
            child_end = (s.key_of(v) + length) & MASK
            if attributes is None or matches_any(edge_filter(v, child_end), attributes):
                out.append(Send(v, replace(message, end=child_end, hops=message.hops + 1)))

    def on_routed(self, message: Publication | Notification, out: ChordOut) -> None:
        end = message.end
        if not isinstance(end, int) or not 0 <= end < SIZE or end == self.s.key:
            return
        if not isinstance(message.topic, str) or not isinstance(message.hops, int):
            return
        attributes = match_attributes(message.attributes)
        if attributes is None:
            return
        if isinstance(message, Notification):
            self._forward_notification(message, attributes, end, out)
            return
        well_formed = isinstance(message.payload, bytes) and isinstance(message.pub_id, int)
        if well_formed and not message.topic.startswith("$"):  # user topics (spec §4 "Topics")
            self._forward_publication(message, attributes, end, out)

    def notify(self, topic: str, attributes: dict[str, Any], out: ChordOut) -> None:
        """Publish a maintenance notification from here with R = K (spec §7)."""
        message = Notification(topic=topic, attributes=attributes, end=self.s.key, hops=0)
        self._forward_notification(message, attributes, None, out)
