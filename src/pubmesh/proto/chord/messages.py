"""Wire messages of the chord stack (spec §10; tags 300–399, and 540–541 for the topic
history of spec §14).

Layers (for the cost tables): ``broadcast`` carries payload (Publication), ``ring`` the
maintenance notifications routed like publications (§5.1–5.3: location and join notices),
``membership`` joins, replies, stabilization and leaves, ``filter`` the responsibility changes
and filter updates of §4.4 and §5.2.

One departure from the spec's table: FilterUpdate carries its conjunctions as their canonical
JSON texts (``tuple[str, ...]``) rather than as JSON objects. A canonical text determines its
conjunction (:mod:`pubmesh.proto.content.filters`), equality of edge filters *is* equality of
these texts, and a receiver parses each distinct text once (a cache keyed by the text) instead
of re-validating every object of every update, which dominates the cost of a filter wave.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pubmesh.proto.core import Message, register_message


@dataclass(frozen=True, slots=True, kw_only=True)
class Publication(Message):
    """A publication forwarded u→v: v is responsible for the interested nodes with keys in
    [key(v), end) (Terpstra et al. §4.3). ``hops`` counts overlay hops, this one included."""

    topic: str
    pub_id: int
    payload: bytes
    attributes: Mapping[str, Any]
    end: int
    hops: int

    def publication(self) -> int | None:
        return self.pub_id


register_message(Publication, 300, layer="broadcast", payload=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Notification(Message):
    """A maintenance notification (location or join notice, Terpstra et al. §5.1), routed exactly
    as a publication: ``topic`` is "$chord.location" or "$chord.join"."""

    topic: str
    attributes: Mapping[str, Any]
    end: int
    hops: int


register_message(Notification, 301, layer="ring")


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinRequest(Message):
    """A joining node asks its contact to locate its successor (spec §7 step 1)."""

    rid: int


register_message(JoinRequest, 302, layer="membership")


@dataclass(frozen=True, slots=True, kw_only=True)
class LocationReply(Message):
    """The owner of ``target`` (the sender) answers lookup ``rid`` straight to the asker, with
    its predecessor and its successor list (spec §7 step 3)."""

    rid: int
    target: int
    pred: int | None
    successors: tuple[int, ...]


register_message(LocationReply, 303, layer="membership")


@dataclass(frozen=True, slots=True, kw_only=True)
class RespChange(Message):
    """The sender's range for the receiver is now [key(receiver), end); None: the edge is gone
    (spec §7 "Edge change", replacing the paper's responsibility-change publication).

    ``clips`` are the other range ends the sender needs the receiver's filter for: the ends of
    its own in-neighbours' ranges that fall inside [key(receiver), end) (see
    :mod:`pubmesh.proto.chord.node`, "Clipped filters")."""

    epoch: int
    seq: int
    end: int | None
    clips: tuple[int, ...] = ()


register_message(RespChange, 304, layer="filter")


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterUpdate(Message):
    """The sender's union filter h for the receiver's range [key(sender), end) (Terpstra et al.
    §4.4), replacing the last one for that end. ``range_seq`` acknowledges the receiver's
    RespChange of that sequence number."""

    epoch: int
    seq: int
    range_seq: int
    end: int
    filter: tuple[str, ...]


register_message(FilterUpdate, 305, layer="filter")


@dataclass(frozen=True, slots=True, kw_only=True)
class SuccListRequest(Message):
    """Chord's stabilize: what are your predecessor and successor list? (spec §7)"""


register_message(SuccListRequest, 306, layer="membership")


@dataclass(frozen=True, slots=True, kw_only=True)
class SuccListReply(Message):
    pred: int | None
    successors: tuple[int, ...]


register_message(SuccListReply, 307, layer="membership")


@dataclass(frozen=True, slots=True, kw_only=True)
class Leaving(Message):
    """The sender leaves gracefully; here are its predecessor and successor list (spec §9)."""

    pred: int | None
    successors: tuple[int, ...]


register_message(Leaving, 308, layer="membership")


# ------------------------------------------------------------------------- topic history
# (spec §14; not in Terpstra et al.). Tags 540–549: the chord range 300–399 is the stack's
# own wire, these the history layer's, beside the shared HistoryQuery/HistoryItem (900–903),
# which cannot carry what a content-based history needs: the subscriber's filter in the
# query, the attributes in the item, and the range of the query's tree.


@dataclass(frozen=True, slots=True, kw_only=True)
class ChordHistoryQuery(Message):
    """A late subscriber's history query, broadcast down the asker's binomial tree over the
    whole ring like a publication but without filter pruning (Terpstra et al. §4.3's range
    field; spec §14): the receiver is responsible for [key(receiver), end). ``filter`` is the
    subscription's conjunction as its canonical text; ``count``/``seconds`` the request
    (0: no limit); ``asker`` the node the items go to, ``qid`` its query's number."""

    topic: str
    filter: str
    count: int
    seconds: float
    asker: int
    qid: int
    end: int
    hops: int


register_message(ChordHistoryQuery, 540, layer="history")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChordHistoryItem(Message):
    """One retained publication, sent by its publisher straight to the asker of query
    ``qid`` (spec §14); ``age``: seconds since it published it."""

    topic: str
    pub_id: int
    payload: bytes
    attributes: Mapping[str, Any]
    qid: int
    age: float

    def publication(self) -> int | None:
        return self.pub_id


register_message(ChordHistoryItem, 541, layer="history", payload=True)
