"""Topic history for late subscribers (docs/history.md): the request, its text form, and the two
messages of a history exchange between members of a topic.

What a late subscriber gets
===========================
``Subscribe(topic, history=HistoryRequest(count, seconds))`` asks, besides the live traffic,
for the publications issued before the subscription: the newest ``count`` of them (0: no
limit), none older than ``seconds`` (0: no limit), as far as the members it asks still retain
them. They reach the application as ordinary deliveries marked ``replayed``
(:class:`pubmesh.proto.core.Deliver`), before the live ones of the same publishers where the
stack can tell, and never twice: a replayed copy and a live copy of one publication are one
delivery, because the replayed copy goes through the same duplicate filter as the live ones.

Where the history comes from is each stack's design (``docs/protocols/<stack>.md``):

* ``gossip``: the swarm's members, from Plumtree's message cache (the payloads a member keeps
  ``payload_retention`` seconds, within ``cache_bytes``, to answer GRAFTs: Leitão, Pereira &
  Rodrigues, "Epidemic Broadcast Trees", §3.3's lazy-push recovery, which already serves a
  missing message from a neighbour's cache). The exchange is that recovery's two steps: a
  new member asks each of its first :data:`QUERY_PEERS` neighbours (the links HyParView
  gives it, "HyParView" §3) which publications it holds (:class:`HistoryQuery`); each answers
  with their ids (:class:`HistoryOffer`, Plumtree's IHAVE), and the new member fetches from
  each only the ids no earlier offer brought (:class:`HistoryFetch`, its GRAFT), so asking
  several members costs ids, not payloads twice. This is also how Zenoh's AdvancedSubscriber
  works: it queries the publishers' caches when it starts (its ``history`` option) and
  recovers a gap by sequence number. A member answers each node's query at most once per
  ``history_interval``, with at most ``history_items`` ids, and serves one fetch per query,
  of ids it offered: a member with a valid certificate cannot turn one small query into an
  unbounded reply. A new member takes an offer or an item only from a member it asked, and
  an item only for an id it fetched from that member.
* ``skipring``: its own full history (Feldmann et al., "Skip Ring", §4: every subscriber ends
  with every publication ever issued on its topic; the history request changes nothing).

The wire
========
:class:`HistoryQuery` names the topic and the request; :class:`HistoryOffer` the ids held,
oldest first; :class:`HistoryFetch` the ids wanted; each publication fetched is one
:class:`HistoryItem` (the publication and its payload), so that a signed mode can carry each
item's signature beside it as it does a live copy's.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mypy_extensions import mypyc_attr

from pubmesh.proto.core import HistoryRequest, Message, register_message

__all__ = [
    "ANSWERED_KEPT",
    "QUERY_PEERS",
    "AnswerLimit",
    "HistoryFetch",
    "HistoryItem",
    "HistoryOffer",
    "HistoryQuery",
    "HistoryRequest",
    "Retained",
    "Retention",
    "parse_history",
]

#: members a new subscriber asks for the topic's history (the first links it gets)
QUERY_PEERS = 4
#: nodes whose queries a member remembers (for its once-per-interval rule), the oldest
#: forgotten first
ANSWERED_KEPT = 256
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_history(value: object) -> HistoryRequest:
    """A history request from its text (``all``; a count such as ``50``; a duration such as
    ``90s``, ``5m``, ``1h``) or from a JSON value (an int is a count). ValueError, saying what
    is accepted, for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"history: {value!r} is not all, a count or a duration")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"history: a count must be ≥ 1, got {value}")
        return HistoryRequest(count=value)
    if not isinstance(value, str):
        raise ValueError(f"history: {value!r} is not all, a count or a duration")
    text = value.strip().lower()
    if text == "all":
        return HistoryRequest()
    if text.isdigit():
        return parse_history(int(text))
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"history: {value!r} is not all, a count (50) or a duration (90s, 5m, 1h)")
    return HistoryRequest(seconds=float(match.group(1)) * _UNIT[match.group(2)])


@dataclass(frozen=True, slots=True)
class Retained:
    """One publication a node keeps for late subscribers."""

    pub_id: int
    payload: bytes
    #: when the node first had it (its run time)
    t: float
    attributes: Mapping[str, Any] | None = None
    #: the stack's own mark for it, JSON-able (brokertree: its sequence number), or None
    mark: Any = None


#: what a node's retentions journal for its data directory: each publication kept, with the
#: retention that keeps it (its topic and bounds)
Journal = list[tuple["Retention", Retained]]


class Retention:
    """A node's retained publications of one topic, for stacks that have no cache of their
    own to serve a history from: the newest ``count`` (0: none kept), none older than
    ``seconds``, at most ``max_bytes`` of payload; the oldest go first whichever bound is
    hit. Kept in the order first had, one entry per id.

    With a ``journal`` (a node with a data directory: ``StackNode.keep_retained``) each
    publication kept is also appended to it, for the runtime to write at its next group
    commit; what the bounds drop the store drops by the same bounds."""

    __slots__ = ("bytes", "count", "items", "journal", "max_bytes", "seconds", "topic")

    def __init__(
        self,
        count: int,
        seconds: float,
        max_bytes: int,
        topic: str = "",
        journal: Journal | None = None,
    ) -> None:
        self.count, self.seconds, self.max_bytes = count, seconds, max_bytes
        self.topic = topic
        self.journal = journal
        self.items: OrderedDict[int, Retained] = OrderedDict()
        self.bytes = 0

    def add(
        self,
        pub_id: int,
        payload: bytes,
        now: float,
        attributes: Mapping[str, Any] | None = None,
        mark: Any = None,
    ) -> None:
        """Keep a publication (once per id), then drop what the bounds exclude."""
        if self.count <= 0 or pub_id in self.items:
            return
        item = self.items[pub_id] = Retained(pub_id, payload, now, attributes, mark)
        self.bytes += len(payload)
        if self.journal is not None:
            self.journal.append((self, item))
        self.expire(now)

    def expire(self, now: float) -> None:
        """Drop the oldest while over a bound (count, bytes, age)."""
        items = self.items
        while items:
            oldest = next(iter(items.values()))
            if (
                len(items) > self.count
                or self.bytes > self.max_bytes
                or (self.seconds > 0 and now - oldest.t > self.seconds)
            ):
                del items[oldest.pub_id]
                self.bytes -= len(oldest.payload)
            else:
                break

    def select(self, count: int, seconds: float, now: float) -> list[Retained]:
        """What a request asks for: the newest ``count`` (0: all) of those had within
        ``seconds`` (0: any), oldest first."""
        self.expire(now)
        found = [r for r in self.items.values() if not seconds or now - r.t <= seconds]
        return found[-count:] if count else found


def checked_retained(item: Retained) -> Retained:
    """``item`` as a data directory gave it back, if it is one (an id, bytes, a finite time,
    attributes with text keys); ValueError naming what is wrong otherwise (a damaged or
    planted file: the node refuses to start rather than serve it to late subscribers)."""
    if not isinstance(item.pub_id, int) or isinstance(item.pub_id, bool):
        raise ValueError(f"a retained publication's id is not an integer: {item.pub_id!r}")
    if not isinstance(item.payload, bytes):
        raise ValueError(f"retained publication {item.pub_id}: its payload is not bytes")
    if not isinstance(item.t, float) or not math.isfinite(item.t):
        raise ValueError(f"retained publication {item.pub_id}: its time is not a number")
    attributes = item.attributes
    if attributes is not None and not (
        isinstance(attributes, Mapping) and all(isinstance(k, str) for k in attributes)
    ):
        raise ValueError(f"retained publication {item.pub_id}: its attributes are not a map")
    return item


class AnswerLimit:
    """Whom a node answered a history request, and when: one answer per key (an asker and a
    topic) per ``interval`` seconds, the :data:`ANSWERED_KEPT` keys answered last remembered
    (the oldest forgotten first), so a member cannot make it answer without limit and the
    record stays bounded."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at: OrderedDict[tuple[Any, ...], float] = OrderedDict()

    def allow(self, key: tuple[Any, ...], now: float, interval: float) -> bool:
        """True, and the answer recorded, unless ``key`` was answered within ``interval``."""
        at = self._at
        last = at.get(key)
        if last is not None and now - last < interval:
            return False
        at.pop(key, None)
        if len(at) >= ANSWERED_KEPT:
            at.popitem(last=False)
        at[key] = now
        return True


def item_age(age: float) -> float:
    """The age a history item states (seconds since its holder first had the publication),
    as its receiver takes it: a finite number ≥ 0, else 0. A member that answers can misdate
    what it sends, no more: the age only says when the publication was published."""
    return age if 0.0 <= age < math.inf else 0.0  # NaN fails both comparisons


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryQuery(Message):
    """A new subscriber asks a member for the topic's retained publications: the newest
    ``count`` (0: all retained), none older than ``seconds`` (0: no limit)."""

    topic: str
    count: int
    seconds: float


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryItem(Message):
    """One retained publication, fetched by a :class:`HistoryFetch`; ``age``: seconds since
    the sender first had it."""

    topic: str
    pub_id: int
    payload: bytes
    age: float

    def publication(self) -> int | None:
        return self.pub_id


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryOffer(Message):
    """A member's answer to a :class:`HistoryQuery`: the ids it holds, oldest first."""

    topic: str
    ids: "tuple[int, ...]"  # noqa: UP037 (quoted: mypyc writes tuple[int, ...] as tuple)


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryFetch(Message):
    """The new member asks for the payloads of these offered ids, in this order."""

    topic: str
    ids: "tuple[int, ...]"  # noqa: UP037 (quoted: mypyc writes tuple[int, ...] as tuple)


register_message(HistoryQuery, 900, layer="history")
register_message(HistoryItem, 901, layer="history", payload=True)
register_message(HistoryOffer, 902, layer="history")
register_message(HistoryFetch, 903, layer="history")
