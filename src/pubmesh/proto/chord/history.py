"""Topic history of a chord node: publisher-side caches, queried down the late subscriber's
own binomial tree (docs/protocols/chord.md §14, docs/history.md; not in Terpstra et al.).

The design
==========
Terpstra et al. keep no publication once it is delivered (§4.3: a publication travels the
publisher's tree once; §5: payloads are never retransmitted), and no node holds a topic's
past: a node's only state per publication is its range while forwarding it. So the history
is kept where Zenoh's AdvancedPublisher keeps it, at the publisher:

* **Retain.** Every node keeps the publications *it* issued, per topic
  (:class:`pubmesh.proto.history.Retention`: the newest ``history_count``, none older than
  ``history_seconds``, within ``history_bytes``), with their attributes.
* **Query.** A node that subscribes with a history request waits ``history_delay`` (time for
  its subscription's filter wave, §4.4, to reach the publishers' trees), and once joined
  broadcasts a :class:`~.messages.ChordHistoryQuery` down *its own* binomial tree over the
  whole ring: the range routing of publications and maintenance notifications (§4.3, §5.1),
  without the edge filters, because what is wanted is every publisher, and nobody subscribes
  to "being a publisher". Every node receives it once (§4.3's proof: ranges nest and siblings
  are disjoint), N − 1 messages in O(log N) depth.
* **Answer.** Each receiver forwards it on, then sends the asker, straight (as the owner of a
  location answers a lookup, §5.1), each of its retained publications of the topic that the
  query's filter matches: at most ``history_items``, the newest ``count``, none older than
  ``seconds``, one :class:`~.messages.ChordHistoryItem` each. It answers (and forwards) one
  query per asker and topic per ``history_interval``.
* **Deliver.** The asker delivers each item once, marked replayed, while it still subscribes,
  only for its current query, only within ``history_window`` of it, at most ``history_items``
  per query, and only if its own filter matches the item's attributes. From the subscription
  until the window closes it remembers the ids it delivered on the topic, live or replayed,
  so a live copy in flight and a replayed copy are one delivery (chord has no duplicate
  filter otherwise: §4.3 never delivers twice).

Cost: a late subscribe costs N − 1 query messages besides its filter wave (about 1.5·N
FilterUpdates, spec §6 "Cost"), plus one item per publication replayed.

:class:`ChordHistory` is one part of :class:`~pubmesh.proto.chord.node.ChordNode`; like the
publisher it is kept across a rejoin (the node's own publications, its queries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pubmesh.proto.chord.keys import SIZE
from pubmesh.proto.chord.life import JOINED, LEAVING, HistoryDone, HistoryTick
from pubmesh.proto.chord.messages import ChordHistoryItem, ChordHistoryQuery
from pubmesh.proto.chord.routing import match_attributes, parse_conjunction
from pubmesh.proto.chord.shared import ChordOut, ChordState, RouteQuery
from pubmesh.proto.content import Conjunction, matches, publication_attributes
from pubmesh.proto.core import (
    Deliver,
    HistoryRequest,
    NodeId,
    Send,
    SetTimer,
    Timer,
    TraceRecord,
)
from pubmesh.proto.history import AnswerLimit, Journal, Retention, item_age


@dataclass(slots=True)
class _Asking:
    """A subscription's history request, from the Subscribe to the end of its window."""

    request: HistoryRequest
    #: the query's number once sent (0: not sent yet)
    qid: int = 0
    #: items taken for the query
    accepted: int = 0
    #: the ids delivered on the topic since the subscription, live or replayed
    seen: set[int] = field(default_factory=set)


class ChordHistory:
    """The topic history of one chord node (module doc)."""

    def __init__(self, s: ChordState) -> None:
        self.s = s
        #: topic -> the node's own publications it retains
        self.retained: dict[str, Retention] = {}
        #: topic -> the subscription's history request, until its window closes
        self.asking: dict[str, _Asking] = {}
        #: (asker, topic) -> when its last query was taken, the oldest forgotten first
        self.answered = AnswerLimit()
        self.next_qid = 1

    # ------------------------------------------------------------------ the publisher side
    def retain(
        self,
        topic: str,
        pub_id: int,
        payload: bytes,
        attributes: dict[str, Any],
        now: float,
        journal: Journal | None,
    ) -> None:
        """Keep one of the node's own publications as it is issued (each new retention
        appends to ``journal``, the node's data directory's, if it keeps one)."""
        p = self.s.params
        kept = self.retained.get(topic)
        if kept is None:
            if p.history_count <= 0:
                return
            kept = self.retained[topic] = Retention(
                p.history_count, p.history_seconds, p.history_bytes, topic, journal
            )
        kept.add(pub_id, payload, now, attributes)

    def on_query(self, src: NodeId, query: ChordHistoryQuery, now: float, out: ChordOut) -> None:
        """A query down the asker's tree (module doc, "Answer"): forward it over the range,
        then send the asker what this node retains that the query asks for."""
        s = self.s
        if s.phase not in (JOINED, LEAVING):
            return
        end, topic, asker = query.end, query.topic, query.asker
        if not isinstance(end, int) or not 0 <= end < SIZE or end == s.key:
            return
        if not isinstance(topic, str) or topic.startswith("$") or not isinstance(query.hops, int):
            return
        if not _is_int(asker) or not _is_int(query.qid) or not _is_int(query.count):
            return
        if not isinstance(query.seconds, int | float) or not isinstance(query.filter, str):
            return
        conj = parse_conjunction(query.filter)
        if conj is None:
            return
        if not self._take(asker, topic, now):
            return
        out.route(RouteQuery(query, end))
        self._answer(asker, topic, conj, query, now, out)

    def _take(self, asker: NodeId, topic: str, now: float) -> bool:
        """One query per asker and topic per history_interval (spec §14): a repeated one is
        neither answered nor forwarded, so a flood of queries costs one broadcast per
        interval."""
        if not self.answered.allow((asker, topic), now, self.s.params.history_interval):
            self.s.count("history_over_limit")
            return False
        return True

    def _answer(
        self,
        asker: NodeId,
        topic: str,
        conj: Conjunction,
        query: ChordHistoryQuery,
        now: float,
        out: ChordOut,
    ) -> None:
        kept = self.retained.get(topic)
        if kept is None:
            return
        limit = self.s.params.history_items
        count = min(query.count, limit) if query.count > 0 else limit
        held = [
            r
            for r in kept.select(0, max(float(query.seconds), 0.0), now)
            if matches(conj, publication_attributes(match_attributes(r.attributes), topic))
        ]
        for r in held[-count:] if count else ():
            item = ChordHistoryItem(
                topic=topic,
                pub_id=r.pub_id,
                payload=r.payload,
                attributes=dict(r.attributes or {}),
                qid=query.qid,
                age=now - r.t,
            )
            if asker == self.s.node_id:
                self.on_item(asker, item, now, out)
            else:
                out.append(Send(asker, item))
        if held:
            self.s.count("history_answered")

    # ------------------------------------------------------------------ the subscriber side
    def subscribe(self, topic: str, request: HistoryRequest, out: ChordOut) -> None:
        """A Subscribe with a history request that the filters took (spec §14): the query
        goes after ``history_delay`` if joined, else after the join (:meth:`joined`)."""
        s = self.s
        if topic not in s.subs or topic in self.asking:
            return
        self.asking[topic] = _Asking(request)
        if s.phase == JOINED:
            out.append(SetTimer(s.params.history_delay, HistoryTick(s.life, topic)))

    def leave(self) -> None:
        """The node leaves the ring: every query it was waiting on ends with it."""
        self.asking.clear()

    def unsubscribe(self, topic: str) -> None:
        self.asking.pop(topic, None)

    def joined(self, out: ChordOut) -> None:
        """The node (re)joined: the queries not sent yet go after ``history_delay``."""
        s = self.s
        for topic in sorted(self.asking):
            if self.asking[topic].qid == 0:
                out.append(SetTimer(s.params.history_delay, HistoryTick(s.life, topic)))

    def first(self, topic: str, pub_id: int) -> bool:
        """Is this the first delivery of ``pub_id`` on ``topic``? (Always, but within a
        history request's window: module doc, "Deliver".)"""
        asking = self.asking.get(topic)
        if asking is None:
            return True
        if pub_id in asking.seen:
            return False
        asking.seen.add(pub_id)
        return True

    def fire(self, timer: Timer, now: float, out: ChordOut) -> None:
        s = self.s
        match timer:
            case HistoryTick(life=life, topic=topic):
                asking = self.asking.get(topic)
                if life != s.life or s.phase != JOINED or asking is None or asking.qid:
                    return
                conj = s.subs.get(topic)
                if conj is None:
                    return
                asking.qid = qid = self.next_qid
                self.next_qid += 1
                out.append(SetTimer(s.params.history_window, HistoryDone(life, topic, qid)))
                request = asking.request
                query = ChordHistoryQuery(
                    topic=topic,
                    filter=conj.text,
                    count=request.count,
                    seconds=request.seconds,
                    asker=s.node_id,
                    qid=qid,
                    end=s.key,
                    hops=0,
                )
                s.count("history_queries")
                out.append(TraceRecord("chord.history_query", {"topic": topic, "qid": qid}))
                self._take(s.node_id, topic, now)
                out.route(RouteQuery(query, None))
                self._answer(s.node_id, topic, conj, query, now, out)
            case HistoryDone(topic=topic, qid=qid):
                asking = self.asking.get(topic)
                if asking is not None and asking.qid == qid:
                    del self.asking[topic]

    def on_item(self, src: NodeId, item: ChordHistoryItem, now: float, out: ChordOut) -> None:
        """An answer to this node's query (module doc, "Deliver")."""
        s = self.s
        topic = item.topic
        asking = self.asking.get(topic) if isinstance(topic, str) else None
        if asking is None or not asking.qid or item.qid != asking.qid:
            return  # not asked, or not the current query
        conj = s.subs.get(topic)
        if conj is None or asking.accepted >= s.params.history_items:
            return
        if not isinstance(item.payload, bytes) or not _is_int(item.pub_id):
            return
        attributes = match_attributes(item.attributes)
        if attributes is None or not matches(conj, publication_attributes(attributes, topic)):
            return
        asking.accepted += 1
        if not self.first(topic, item.pub_id):
            return
        s.delivered += 1
        age = item_age(item.age)
        out.append(
            Deliver(
                topic, item.pub_id, item.payload, 1, dict(item.attributes), replayed=True, age=age
            )
        )
        out.append(
            TraceRecord(
                "history.replayed", {"topic": topic, "pub_id": item.pub_id, "from": src, "age": age}
            )
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
