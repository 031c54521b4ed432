"""The supervisor: the database of (label, subscriber) per topic and its self-stabilizing
maintenance (Feldmann et al. §3.1, §3.3, §4.1; docs/protocols/skipring.md §4, §7).

How it works
============
The supervisor is the gateway every subscriber knows (its address is hard-coded). Per topic it
keeps a database DB of tuples (label, subscriber); in a legitimate state the labels are exactly
l(0), ..., l(n-1), one per subscriber. It never forwards publications (except the relay of a
non-subscriber's publication, our extension); it only hands out *configurations*
(label, predecessor, successor), where predecessor and successor are the cyclic neighbours of the
label in r-order among the labels in DB:

* **Timeout** (§3.1): repair the database, then configure the next subscriber in round-robin
  order (``next := next + 1 mod n``, one index per topic, spec §10.5). After n Timeouts every
  recorded subscriber has heard its correct configuration.
* **Subscribe** (§4.1): insert (l(n), v) and send v its configuration: one message.
* **Unsubscribe** (§4.1): remove v, move the holder w of l(n-1) into v's label, send w its new
  configuration and v its permission to leave (a configuration with label ⊥): two messages.
* **Configuration request** (actions (i)-(iv), §3.2.1): record the node if it is missing, send
  it its configuration.
* **Crash** (§3.3): the supervisor alone runs a failure detector; a crashed subscriber is
  removed as an unsubscribe would remove it (without the permission message).

The four corruptions of a database (§3.1) are repaired locally, without messages:
(i) a tuple without a subscriber is deleted; (ii) a subscriber with several labels keeps only
the lowest one (smallest l^-1) whenever it requests, unsubscribes or is picked in Timeout;
(iii) a missing label l(i), i < n, is given to the tuple with the largest l^-1; (iv) a label
that is not l(i) for any i < n is removed by (iii). The database is keyed by label, so
duplicate labels cannot exist.

The one rule that keeps it correct: **every configuration is computed from a repaired
database** (repairs run before each subscribe, unsubscribe, request and round-robin pick), so
the supervisor never hands out a label twice or a neighbour that is not recorded.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

from pubmesh.proto.core import (
    Input,
    NodeContext,
    NodeId,
    NodeStatistics,
    Output,
    PeerDown,
    Receive,
    Send,
    SetTimer,
    SnapshotRow,
    StackNode,
    Start,
    Timer,
    TimerFired,
    TraceRecord,
)
from pubmesh.proto.skipring.labels import Label, index, is_label, label
from pubmesh.proto.skipring.messages import (
    Configuration,
    ConfigurationRequest,
    PublishNew,
    PublishRelay,
    SubscribeRequest,
    UnsubscribeRequest,
)
from pubmesh.proto.skipring.params import SkipRingParams


@dataclass(frozen=True, slots=True)
class SupervisorTimeout(Timer):
    """The supervisor's periodic Timeout action: database repair and probes (Feldmann et al.
    §4.1)."""


#: l^-1 given to a label outside the image of l: larger than any real index (case (iv)).
INVALID_INDEX = 1 << 62


def _index(name: Label) -> int:
    return index(name) if is_label(name) else INVALID_INDEX


def _operation(
    kind: str, topic: str, node: NodeId, out: list[Output], *, since: int
) -> TraceRecord:
    """The trace record of one subscribe, unsubscribe or crash removal: ``messages`` counts the
    Send outputs the supervisor produced for it (Feldmann et al. §4.1: 1 for a subscribe, 2 for an
    unsubscribe in a legitimate state)."""
    messages = sum(1 for output in out[since:] if isinstance(output, Send))
    return TraceRecord(kind, {"topic": topic, "node": node, "messages": messages})


class TopicDatabase:
    """DB for one topic: a hashmap label -> subscriber, the reverse map, and an index of the
    labels in r-order (Feldmann et al. §3.1, testbed ``Database``)."""

    __slots__ = ("by_label", "indices", "labels_of", "next", "order", "orphans")

    def __init__(self) -> None:
        #: label -> subscriber; None is a tuple without a subscriber (case (i))
        self.by_label: dict[Label, NodeId | None] = {}
        #: subscriber -> its labels (more than one is case (ii))
        self.labels_of: dict[NodeId, list[Label]] = {}
        #: all labels sorted by r (string order, see labels.py)
        self.order: list[Label] = []
        #: all l^-1 values, sorted (INVALID_INDEX for labels outside the image of l)
        self.indices: list[int] = []
        self.orphans: set[Label] = set()
        #: round-robin position
        self.next = 0

    @property
    def n(self) -> int:
        return len(self.by_label)

    def __contains__(self, node: NodeId) -> bool:
        return node in self.labels_of

    def members(self) -> list[NodeId]:
        return sorted(self.labels_of)

    # ---------------------------------------------------------------- primitive edits
    def add(self, name: Label, node: NodeId | None) -> None:
        self._record(name, node)
        bisect.insort(self.order, name)
        bisect.insort(self.indices, _index(name))

    def _record(self, name: Label, node: NodeId | None) -> None:
        """The maps of :meth:`add` (not the sorted lists)."""
        if name in self.by_label:
            raise KeyError(f"label {name!r} is already in the database")
        self.by_label[name] = node
        if node is None:
            self.orphans.add(name)
        else:
            self.labels_of.setdefault(node, []).append(name)

    def add_all(self, entries: Iterable[tuple[Label, NodeId | None]]) -> None:
        """:meth:`add` of each entry in turn, with the two sorted lists sorted once at the end
        instead of kept sorted by insertion: a warm start records 10^6 labels, whose r-order
        is not their order, and insort moved half the list for each."""
        try:
            for name, node in entries:
                self._record(name, node)
        finally:
            # the labels are distinct, so sorting gives what insort built
            self.order = sorted(self.by_label)
            self.indices = sorted(map(_index, self.by_label))

    def remove(self, name: Label) -> NodeId | None:
        node = self.by_label.pop(name)
        del self.order[bisect.bisect_left(self.order, name)]
        del self.indices[bisect.bisect_left(self.indices, _index(name))]
        self.orphans.discard(name)
        if node is not None:
            names = self.labels_of[node]
            names.remove(name)
            if not names:
                del self.labels_of[node]
        return node

    def relabel(self, old: Label, new: Label) -> None:
        node = self.remove(old)
        self.add(new, node)

    def label_of(self, node: NodeId) -> Label | None:
        names = self.labels_of.get(node)
        if not names:
            return None
        return min(names, key=_index)

    # ---------------------------------------------------------------- the four corruptions
    def is_corrupted(self) -> bool:
        """Whether any of the four conditions of §3.1 holds."""
        if self.orphans:
            return True
        if any(len(names) > 1 for names in self.labels_of.values()):
            return True
        return bool(self.indices) and self.indices[-1] >= self.n

    def repair(self) -> tuple[int, int]:
        """Repairs (i) and (iii)/(iv) of §3.1, locally. Returns (tuples deleted, relabelled)."""
        deleted = 0
        for name in sorted(self.orphans):
            self.remove(name)
            deleted += 1
        relabelled = 0
        n = self.n
        if n and self.indices[-1] >= n:
            present = {index(name) for name in self.by_label if _index(name) < n}
            missing = [i for i in range(n) if i not in present]
            extras = sorted(
                (name for name in self.by_label if _index(name) >= n),
                key=lambda name: (_index(name), name),
                reverse=True,
            )
            for i, extra in zip(missing, extras, strict=True):
                self.relabel(extra, label(i))
                relabelled += 1
        return deleted, relabelled

    def dedupe(self, node: NodeId) -> int:
        """Repair (ii) for ``node`` ("CheckMultipleCopies"): keep only its lowest label.
        Returns the number of tuples removed."""
        names = self.labels_of.get(node)
        if not names or len(names) == 1:
            return 0
        keep = min(names, key=_index)
        removed = 0
        for name in sorted(set(names) - {keep}):
            self.remove(name)
            removed += 1
        return removed

    # ---------------------------------------------------------------- configurations
    def configuration(self, topic: str, name: Label) -> Configuration:
        """(label, pred, succ): the cyclic r-order neighbours of ``name`` in DB (§3.1)."""
        n = len(self.order)
        if n < 2:
            return Configuration(topic=topic, label=name)
        pos = bisect.bisect_left(self.order, name)
        pred_label = self.order[pos - 1]
        succ_label = self.order[(pos + 1) % n]
        return Configuration(
            topic=topic,
            label=name,
            pred_label=pred_label,
            pred=self.by_label[pred_label],
            succ_label=succ_label,
            succ=self.by_label[succ_label],
        )


class Supervisor(StackNode):
    """The supervisor node of the skipring stack (Feldmann et al. §3.1)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: SkipRingParams = ctx.params if ctx.params is not None else SkipRingParams()
        self.databases: dict[str, TopicDatabase] = {}
        #: subscribers the failure detector reported down, not heard of since: a request to
        #: configure one of them does not record it again (§3.3)
        self.unreachable: set[NodeId] = set()
        #: (topic, subscriber) -> Timeout count when it unsubscribed. For one round-robin sweep
        #: afterwards a neighbour's stale action (iii) report does not record it again (its own
        #: request does); then the entry expires, so a junk unsubscribe in a corrupted state
        #: cannot keep a subscriber out for good
        self.departed: dict[tuple[str, NodeId], int] = {}
        self.counters: dict[str, int] = {
            "timeouts": 0,
            "round_robin_configurations": 0,
            "subscribe_requests": 0,
            "subscribe_messages": 0,
            "unsubscribe_operations": 0,
            "unsubscribe_messages": 0,
            "unsubscribe_repeats": 0,
            "config_requests": 0,
            "config_requests_i": 0,
            "config_requests_ii": 0,
            "config_requests_iii": 0,
            "config_requests_iv": 0,
            "config_request_messages": 0,
            "crash_removals": 0,
            "crash_messages": 0,
            "repair_orphans_deleted": 0,
            "repair_duplicates_removed": 0,
            "repair_relabelled": 0,
            "relays": 0,
        }

    def database(self, topic: str) -> TopicDatabase:
        db = self.databases.get(topic)
        if db is None:
            db = self.databases[topic] = TopicDatabase()
        return db

    # ------------------------------------------------------------------ the entry point
    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Receive(src=src, message=message):
                self.unreachable.discard(src)
                match message:
                    case ConfigurationRequest(topic=topic, node=node, action=action):
                        if node == src:
                            self.departed.pop((topic, node), None)
                        elif self._recently_departed(topic, node):
                            return out  # a stale report about a node that left (§4.1)
                        self._configuration_request(topic, node, action, out)
                    case SubscribeRequest(topic=topic):
                        self.departed.pop((topic, src), None)
                        self._subscribe(topic, src, out)
                    case UnsubscribeRequest(topic=topic):
                        self._unsubscribe(topic, src, out)
                    case PublishRelay():
                        self._relay(message, out)
            case TimerFired(timer=SupervisorTimeout()):
                self._timeout(out)
                out.append(SetTimer(self.params.supervisor_interval, SupervisorTimeout()))
            case PeerDown(peer=peer):
                self._crashed(peer, out)
            case Start():
                out.append(SetTimer(self.params.supervisor_interval, SupervisorTimeout()))
        return out

    # ------------------------------------------------------------------ helpers
    def _recently_departed(self, topic: str, node: NodeId) -> bool:
        """Whether a third party's report about ``node`` is stale: ``node`` left ``topic``
        less than a departure window ago. The window is a round of the database (every
        recorded node configured once) or, if longer, the time the leaver keeps answering
        with RemoveConnection before it releases the topic (``release_after`` of its timeout
        intervals), during which the references to it that others still hold die out. A
        shorter window re-records a leaver on a neighbour's stale report, and the leaver
        unsubscribes a second time (found at n = 64, seed 4 of skipring_paper_claims)."""
        since = self.departed.get((topic, node))
        if since is None:
            return False
        db = self.databases.get(topic)
        p = self.params
        release = math.ceil(p.release_after * p.timeout_interval / p.supervisor_interval)
        if self.counters["timeouts"] - since > max(10, db.n if db is not None else 0, release):
            del self.departed[(topic, node)]
            return False
        return True

    def _expire_departed(self) -> None:
        for topic, node in sorted(self.departed):
            self._recently_departed(topic, node)

    def _repair(self, db: TopicDatabase) -> None:
        deleted, relabelled = db.repair()
        self.counters["repair_orphans_deleted"] += deleted
        self.counters["repair_relabelled"] += relabelled

    def _settle(self, db: TopicDatabase, node: NodeId) -> Label | None:
        """Repair (ii) for ``node``, then (i)/(iii) for the holes that may leave; ``node``'s
        label afterwards."""
        removed = db.dedupe(node)
        if removed:
            self.counters["repair_duplicates_removed"] += removed
            self._repair(db)
        return db.label_of(node)

    def _configure(self, db: TopicDatabase, topic: str, node: NodeId, out: list[Output]) -> bool:
        name = db.label_of(node)
        if name is None:
            return False
        out.append(Send(node, db.configuration(topic, name)))
        return True

    # ------------------------------------------------------------------ Timeout
    def _timeout(self, out: list[Output]) -> None:
        """Round-robin configuration, one subscriber per topic (§3.1, spec §10.5)."""
        self.counters["timeouts"] += 1
        for topic in sorted(self.databases):
            db = self.databases[topic]
            self._repair(db)
            n = db.n
            if n == 0:
                continue
            db.next = (db.next + 1) % n
            node = db.by_label.get(label(db.next))
            if node is None:
                continue
            self._settle(db, node)
            if self._configure(db, topic, node, out):
                self.counters["round_robin_configurations"] += 1

    # ------------------------------------------------------------------ requests
    def _subscribe(self, topic: str, node: NodeId, out: list[Output]) -> None:
        """Subscribe(v) (§4.1): insert (l(n), v) and send v its configuration."""
        self.counters["subscribe_requests"] += 1
        sent = len(out)
        db = self.database(topic)
        self._repair(db)
        if node not in db:
            db.add(label(db.n), node)
        self._settle(db, node)
        if self._configure(db, topic, node, out):
            self.counters["subscribe_messages"] += 1
        out.append(_operation("supervisor.subscribe", topic, node, out, since=sent))

    def _unsubscribe(self, topic: str, node: NodeId, out: list[Output]) -> None:
        """Unsubscribe(v) (§4.1): remove v, move the holder of l(n-1) into v's label and send it
        its new configuration, grant v permission to leave."""
        sent = len(out)
        db = self.database(topic)
        self._repair(db)
        if node in db:
            self.counters["unsubscribe_operations"] += 1
            self.counters["unsubscribe_messages"] += self._remove(db, topic, node, out) + 1
            kind = "supervisor.unsubscribe"
        else:
            # a repeated request (the permission was lost or is still in flight) or one from a
            # node the database does not record: only the permission is sent again
            self.counters["unsubscribe_repeats"] += 1
            kind = "supervisor.unsubscribe_repeat"
        out.append(Send(node, Configuration(topic=topic, label=None)))
        out.append(_operation(kind, topic, node, out, since=sent))
        self.departed[(topic, node)] = self.counters["timeouts"]
        if len(self.departed) > 4 * (1 + sum(db.n for db in self.databases.values())):
            self._expire_departed()

    def _remove(self, db: TopicDatabase, topic: str, node: NodeId, out: list[Output]) -> int:
        """Remove ``node`` and fill its label with l(n-1)'s holder; messages sent (0 or 1)."""
        mine = self._settle(db, node)
        if mine is None:
            return 0
        last = label(db.n - 1)
        db.remove(mine)
        if mine == last or last not in db.by_label:
            return 0
        moved = db.by_label[last]
        db.relabel(last, mine)
        if moved is None:
            return 0
        out.append(Send(moved, db.configuration(topic, mine)))
        return 1

    def _configuration_request(
        self, topic: str, node: NodeId, action: int, out: list[Output]
    ) -> None:
        """A configuration request (actions (i)-(iv), §3.2.1): record ``node`` if it is
        missing and send it its configuration."""
        self.counters["config_requests"] += 1
        if action in (1, 2, 3, 4):
            self.counters[f"config_requests_{'i' * action if action < 4 else 'iv'}"] += 1
        if node in self.unreachable or node == self.node_id:
            return
        db = self.database(topic)
        self._repair(db)
        if node not in db:
            db.add(label(db.n), node)
        self._settle(db, node)
        if self._configure(db, topic, node, out):
            self.counters["config_request_messages"] += 1

    def _crashed(self, node: NodeId, out: list[Output]) -> None:
        """The failure detector reports ``node`` down (§3.3): remove it from every topic as an
        unsubscribe would (spec §10.10)."""
        self.unreachable.add(node)
        for topic in sorted(self.databases):
            db = self.databases[topic]
            if node in db:
                sent = len(out)
                self._repair(db)
                self.counters["crash_removals"] += 1
                self.counters["crash_messages"] += self._remove(db, topic, node, out)
                out.append(_operation("supervisor.remove_crashed", topic, node, out, since=sent))

    def _relay(self, message: PublishRelay, out: list[Output]) -> None:
        """Hand a non-subscriber's publication to the subscriber labelled "0" (extension)."""
        db = self.databases.get(message.topic)
        target = db.by_label.get(label(0)) if db is not None else None
        if target is None:
            out.append(TraceRecord("skipring.relay_dropped", {"pub_id": message.pub_id}))
            return
        self.counters["relays"] += 1
        out.append(
            Send(
                target,
                PublishNew(
                    topic=message.topic,
                    pub_id=message.pub_id,
                    publisher=message.publisher,
                    payload=message.payload,
                    hops=2,
                ),
            )
        )

    # ------------------------------------------------------------------ queries
    def monitored_peers(self) -> Iterable[NodeId]:
        """Every recorded subscriber: the supervisor's failure detector (§3.3)."""
        nodes: set[NodeId] = set()
        for db in self.databases.values():
            nodes.update(db.labels_of)
        return sorted(nodes)

    def snapshot(self) -> Iterable[SnapshotRow]:
        return [
            SnapshotRow(topic, "supervisor", (), {"n": db.n, "corrupted": db.is_corrupted()})
            for topic, db in sorted(self.databases.items())
        ]

    def statistics(self) -> NodeStatistics:
        counters = dict(self.counters)
        for topic, db in sorted(self.databases.items()):
            counters[f"ring_size.{topic}"] = db.n
        return NodeStatistics(
            role=self.ctx.role,
            neighbors={
                topic: tuple(sorted(n for n in db.by_label.values() if n is not None))
                for topic, db in sorted(self.databases.items())
            },
            counters=counters,
        )
