"""Topic history of a brokertree client: publisher-side caches, queried through the brokers
(docs/protocols/brokertree.md §14, docs/history.md; not in Kazemzadeh & Jacobsen).

The design
==========
Kazemzadeh & Jacobsen keep a publication only until it is confirmed or purged (§8: a node
discards a message once every node on its paths reported it), and a broker holds no topic's
past. So, as on chord (docs/protocols/chord.md §14) and as Zenoh's AdvancedPublisher does,
the history is kept at the publisher:

* **Retain.** Every client keeps the publications *it* issued, per topic
  (:class:`pubmesh.proto.history.Retention`: the newest ``history_count``, none older than
  ``history_seconds``, within ``history_bytes``), with their attributes and their sequence
  number (the origin of their live copies).
* **Query.** A client that subscribes with a history request waits until its subscription is
  *confirmed* (rule CF, Kazemzadeh & Jacobsen §3.5: every broker beyond has the tuple, so
  whatever is published from then on reaches it live), then ``history_delay`` more, and sends a
  :class:`~.messages.HistoryAsk` straight to every broker (every node knows the broker list:
  the tree is computed from it, spec §2). Each broker forwards it to the clients it has a
  session with (its own clients, and those that bypass a failed broker through it, [P §13]).
  ``B + C`` messages: a copy per broker and about one per client.
* **Answer.** A client sends the asker, straight, each of its retained publications of the
  topic that the query's filter matches, oldest first: at most ``history_items``, the newest
  ``count``, none older than ``seconds``, one :class:`~.messages.HistoryPub` each. It answers
  one query per asker and topic per ``history_interval`` (a copy of the same query through a
  second broker is ignored), and so does a broker forward.
* **Deliver.** From its Subscribe the asker *holds* the topic's live copies (they still pass
  the per-publisher high-water mark, spec §6.5) and collects the items, until
  ``history_wait`` after its query; it then delivers, per publisher in its sequence order, the
  union of both (one delivery per publication, marked replayed if the history had it), and
  raises each publisher's mark to the last delivered. An item arriving later is delivered
  only if its sequence number is above the publisher's mark (else it would break that
  publisher's order: counted ``history_late``). It takes items only for its current query,
  from the query until ``history_window`` after the Subscribe, at most ``history_items`` per
  query, while it still holds the subscription and only if its filter matches; the sender of
  an item is its publisher, whose mark it moves.

The high-water mark is per publisher over all topics: a replayed publication is older than
what the subscriber had of that publisher on other topics, and is delivered all the same
(the history precedes the subscription); within the topic each publisher's order is kept.

:class:`BrokerTreeHistory` is one part of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from pubmesh.proto.brokertree.messages import HistoryAsk, HistoryPub, OriginT, SeqT
from pubmesh.proto.brokertree.shared import TreeOut, TreeState
from pubmesh.proto.brokertree.state import RUNNING
from pubmesh.proto.brokertree.wire import norm_seq, predicate, valid_node, valid_seq
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
from pubmesh.proto.history import ANSWERED_KEPT, Journal, Retention, item_age

__all__ = ["BrokerTreeHistory", "HistoryDone", "HistoryFlush", "HistoryTick"]


@dataclass(frozen=True, slots=True)
class HistoryTick(Timer):
    """Send the history query of ``topic`` (``history_delay`` after the confirmation)."""

    life: int
    topic: str
    token: int


@dataclass(frozen=True, slots=True)
class HistoryFlush(Timer):
    """Deliver what the query brought and the live copies held (``history_wait`` after it)."""

    life: int
    topic: str
    token: int


@dataclass(frozen=True, slots=True)
class HistoryDone(Timer):
    """The history window of a subscription closes (``history_window`` after it)."""

    life: int
    topic: str
    token: int


#: one delivery waiting for the flush: its sequence number, the delivery, replayed or live
_Waiting = tuple[SeqT, Deliver, bool]


@dataclass(slots=True)
class _Asking:
    """A subscription's history request, from the Subscribe to the end of its window."""

    request: HistoryRequest
    #: the subscription's origin (a new subscription of the topic is a new request)
    origin: OriginT
    token: int
    #: the query's number once sent (0: not sent yet)
    qid: int = 0
    scheduled: bool = False
    #: live copies are held, and items collected, until the flush
    holding: bool = True
    #: items taken for the query
    accepted: int = 0
    #: publisher -> pub_id -> what waits for the flush
    waiting: dict[NodeId, dict[int, _Waiting]] = field(default_factory=dict)
    #: the ids delivered on the topic since the flush, live or replayed
    seen: set[int] = field(default_factory=set)
    #: pub_id -> when a held item was published (this node's clock), for its age at the flush
    published: dict[int, float] = field(default_factory=dict)


class BrokerTreeHistory:
    """The topic history of one brokertree node (module doc); a broker's only forwards."""

    __slots__ = ("answered", "asking", "next_qid", "next_token", "retained", "s", "seqs")

    def __init__(self, s: TreeState) -> None:
        self.s = s
        #: topic -> the client's own publications it retains
        self.retained: dict[str, Retention] = {}
        #: topic -> pub_id -> its sequence number (the retained ones, and a few gone since)
        self.seqs: dict[str, dict[int, SeqT]] = {}
        #: topic -> the subscription's history request, until its window closes
        self.asking: dict[str, _Asking] = {}
        #: (asker, topic) -> (when its last query was taken, its qid), the oldest forgotten
        #: first
        self.answered: OrderedDict[tuple[NodeId, str], tuple[float, int]] = OrderedDict()
        self.next_qid = 1
        self.next_token = 1

    # ------------------------------------------------------------------ the publisher side
    def retain(
        self,
        topic: str,
        pub_id: int,
        payload: bytes,
        attributes: dict[str, Any],
        seq: SeqT,
        now: float,
        journal: Journal | None,
    ) -> None:
        """Keep one of the client's own publications as it is issued (each new retention
        appends to ``journal``, the node's data directory's, if it keeps one)."""
        p = self.s.params
        kept = self.retained.get(topic)
        if kept is None:
            if p.history_count <= 0:
                return
            kept = self.retained[topic] = Retention(
                p.history_count, p.history_seconds, p.history_bytes, topic, journal
            )
            self.seqs[topic] = {}
        kept.add(pub_id, payload, now, attributes, list(seq))
        seqs = self.seqs[topic]
        if pub_id in kept.items:
            seqs.setdefault(pub_id, seq)
        if len(seqs) > 2 * len(kept.items) + 16:
            self.seqs[topic] = {i: seqs[i] for i in kept.items if i in seqs}

    def on_ask(self, src: NodeId, ask: HistoryAsk, now: float, out: TreeOut) -> None:
        """A query: a broker forwards the asker's to its client peers; a client answers one
        that a broker forwarded (module doc, "Query", "Answer")."""
        s, view = self.s, self.s.view
        if s.phase != RUNNING or view is None or s.sessions is None:
            return
        topic, asker = ask.topic, ask.asker
        if not isinstance(topic, str) or topic.startswith("$") or not valid_node(asker):
            return
        if not _is_int(ask.qid) or not _is_int(ask.count):
            return
        if not isinstance(ask.seconds, int | float) or not ask.seconds >= 0:
            return
        if asker == s.node_id or view.is_broker(asker):
            return
        pred = predicate(topic, ask.filter)
        if pred is None:
            return
        if s.is_broker:
            if src != asker or not self._take(asker, topic, ask.qid, now):
                return
            for peer in s.sessions.open_peers():
                if peer != asker and not view.is_broker(peer):
                    out.append(Send(peer, ask))
            s.count("history_forwarded")
            return
        if not view.is_broker(src) or not self._take(asker, topic, ask.qid, now):
            return
        self._answer(asker, topic, pred, ask, now, out)

    def _take(self, asker: NodeId, topic: str, qid: int, now: float) -> bool:
        """One query per asker and topic per ``history_interval``: a copy of the query taken
        (through another broker) is ignored, another query within the interval counted
        ``history_over_limit``."""
        key = (asker, topic)
        last = self.answered.get(key)
        if last is not None:
            if last[1] == qid:
                return False
            if now - last[0] < self.s.params.history_interval:
                self.s.count("history_over_limit")
                return False
        self.answered.pop(key, None)
        if len(self.answered) >= ANSWERED_KEPT:
            self.answered.popitem(last=False)
        self.answered[key] = (now, qid)
        return True

    def _answer(
        self,
        asker: NodeId,
        topic: str,
        pred: Conjunction,
        ask: HistoryAsk,
        now: float,
        out: TreeOut,
    ) -> None:
        kept = self.retained.get(topic)
        if kept is None:
            return
        seqs = self.seqs.get(topic, {})
        limit = self.s.params.history_items
        count = min(ask.count, limit) if ask.count > 0 else limit
        held = [
            r
            for r in kept.select(0, float(ask.seconds), now)
            if r.pub_id in seqs
            and matches(pred, publication_attributes(dict(r.attributes or {}), topic))
        ]
        for r in held[-count:] if count else ():
            item = HistoryPub(
                topic=topic,
                pub_id=r.pub_id,
                payload=r.payload,
                attributes=dict(r.attributes or {}),
                seq=seqs[r.pub_id],
                qid=ask.qid,
                age=now - r.t,
            )
            if asker == self.s.node_id:
                self.on_item(asker, item, now, out)
            else:
                out.append(Send(asker, item))
        if held and count:
            self.s.count("history_answered")

    # ------------------------------------------------------------------ the subscriber side
    def subscribe(self, topic: str, request: HistoryRequest, origin: OriginT, out: TreeOut) -> None:
        """A new subscription with a history request: hold its live copies from now on, and
        close the window after ``history_window``."""
        s = self.s
        token = self.next_token
        self.next_token += 1
        self.asking[topic] = _Asking(request, origin, token)
        out.append(SetTimer(s.params.history_window, HistoryDone(s.life, topic, token)))

    def confirmed(self, topic: str, origin: OriginT, out: TreeOut) -> None:
        """The client's own subscription is confirmed (rule CF): its query goes after
        ``history_delay``."""
        asking = self.asking.get(topic)
        if asking is None or asking.origin != origin or asking.scheduled:
            return
        asking.scheduled = True
        s = self.s
        out.append(SetTimer(s.params.history_delay, HistoryTick(s.life, topic, asking.token)))

    def unsubscribe(self, topic: str, out: TreeOut) -> None:
        """The subscription ends: its window with it; the live copies it held (delivered by
        the mark already) go to the application, the items it collected do not."""
        asking = self.asking.pop(topic, None)
        if asking is not None and asking.holding:
            for publisher in sorted(asking.waiting):
                mine = asking.waiting[publisher]
                for seq, deliver, replayed in sorted(mine.values(), key=_by_seq):
                    if not replayed:
                        self._emit(publisher, seq, deliver, False, out)

    def seen(self, topic: str, pub_id: int) -> bool:
        """Was this live copy's publication delivered already, replayed, since the flush?"""
        asking = self.asking.get(topic)
        return asking is not None and pub_id in asking.seen

    def hold(self, topic: str, publisher: NodeId, seq: SeqT, deliver: Deliver) -> bool:
        """A live copy that passed the mark: held until the flush (True), or delivered now
        (False, remembered for the window)."""
        asking = self.asking.get(topic)
        if asking is None:
            return False
        if asking.holding:
            asking.waiting.setdefault(publisher, {}).setdefault(
                deliver.pub_id, (seq, deliver, False)
            )
            return True
        asking.seen.add(deliver.pub_id)
        return False

    def fire(self, timer: Timer, now: float, out: TreeOut) -> None:
        s = self.s
        match timer:
            case HistoryTick(life=life, topic=topic, token=token):
                asking = self.asking.get(topic)
                own = s.own.get(topic)
                if life != s.life or s.phase != RUNNING or s.view is None:
                    return
                if asking is None or asking.token != token or asking.qid or own is None:
                    return
                asking.qid = qid = self.next_qid
                self.next_qid += 1
                request = asking.request
                ask = HistoryAsk(
                    topic=topic,
                    filter=dict(own.filter),
                    count=request.count,
                    seconds=request.seconds,
                    asker=s.node_id,
                    qid=qid,
                )
                s.count("history_queries")
                out.append(TraceRecord("brokertree.history_query", {"topic": topic, "qid": qid}))
                for broker in sorted(s.view.brokers):
                    out.append(Send(broker, ask))
                self._answer(s.node_id, topic, own.pred, ask, now, out)
                out.append(SetTimer(s.params.history_wait, HistoryFlush(life, topic, token)))
            case HistoryFlush(life=life, topic=topic, token=token):
                asking = self.asking.get(topic)
                if asking is not None and asking.token == token and asking.holding:
                    self._flush(asking, topic, now, out)
            case HistoryDone(topic=topic, token=token):
                asking = self.asking.get(topic)
                if asking is not None and asking.token == token:
                    if asking.holding:
                        self._flush(asking, topic, now, out)
                    del self.asking[topic]

    def _flush(self, asking: _Asking, topic: str, now: float, out: TreeOut) -> None:
        """Deliver what waited, each publisher's in its sequence order (module doc); a
        replayed one's age counts its wait."""
        asking.holding = False
        published = asking.published
        for publisher in sorted(asking.waiting):
            for seq, deliver, replayed in sorted(asking.waiting[publisher].values(), key=_by_seq):
                asking.seen.add(deliver.pub_id)
                if replayed:
                    deliver = replace(deliver, age=now - published[deliver.pub_id])
                self._emit(publisher, seq, deliver, replayed, out)
        asking.waiting.clear()
        published.clear()

    def _emit(
        self, publisher: NodeId, seq: SeqT, deliver: Deliver, replayed: bool, out: TreeOut
    ) -> None:
        last = self.s.last.get(publisher)
        if last is None or seq > last:
            self.s.last[publisher] = seq
        self.s.delivered += 1
        out.append(deliver)
        if replayed:
            self.s.count("replayed")
            out.append(
                TraceRecord(
                    "history.replayed",
                    {
                        "topic": deliver.topic,
                        "pub_id": deliver.pub_id,
                        "from": publisher,
                        "age": deliver.age,
                    },
                )
            )

    def on_item(self, src: NodeId, item: HistoryPub, now: float, out: TreeOut) -> None:
        """An answer to this client's query (module doc, "Deliver")."""
        s = self.s
        topic = item.topic
        asking = self.asking.get(topic) if isinstance(topic, str) else None
        if asking is None or not asking.qid or item.qid != asking.qid:
            return  # not asked, or not the current query
        own = s.own.get(topic)
        if own is None or own.origin != asking.origin:
            return
        if asking.accepted >= s.params.history_items:
            return
        if not isinstance(item.payload, bytes) or not _is_int(item.pub_id):
            return
        if not valid_seq(item.seq):
            return
        try:
            attributes = {str(k): v for k, v in dict(item.attributes).items()}
        except (TypeError, ValueError):
            return
        if not matches(own.pred, publication_attributes(attributes, topic)):
            return
        asking.accepted += 1
        seq = norm_seq(item.seq)
        age = item_age(item.age)
        deliver = Deliver(topic, item.pub_id, item.payload, 1, attributes, replayed=True, age=age)
        if asking.holding:
            # the history had it: one delivery, replayed, whether or not a live copy came too
            asking.waiting.setdefault(src, {})[item.pub_id] = (seq, deliver, True)
            asking.published[item.pub_id] = now - age
            return
        if item.pub_id in asking.seen:
            return
        last = s.last.get(src)
        if last is not None and seq <= last:
            s.count("history_late")  # after the flush, behind the publisher's order
            return
        asking.seen.add(item.pub_id)
        self._emit(src, seq, deliver, True, out)


def _by_seq(waiting: _Waiting) -> SeqT:
    return waiting[0]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
