"""Group messages of the ``clique`` and ``d2g`` stacks (docs/protocols/relay.md §8; tags 510–539,
and 550–551 for the topic history, an addition: docs/protocols/clique.md "Topic history").

Every group message is routed along relays (:mod:`pubmesh.proto.relay.layer`) and starts with
the relay header: the ``topic`` of the instance it is for, then ``rid`` (the relay it is sent
to at the next hop), ``prev`` (the sender's relay), the ``sink`` and ``direct`` claims of the
sending relay, and ``hop`` (hops along this chain). The senders fill the header with zeros;
the relay layer writes the real values hop by hop.
"""

from __future__ import annotations

from dataclasses import dataclass

from pubmesh.proto.core import Message, register_message
from pubmesh.proto.relay.layer import routed
from pubmesh.proto.relay.messages import Ref

OVERLAY = "overlay"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMessage(Message):
    """The relay header every group message starts with (module doc); not sent itself."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Join(GroupMessage):
    """A subscriber's ``Join(in)`` to the contact (Scheideler's lecture "Join(u)", spec §7)."""

    node: Ref


register_message(Join, 510, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class AskForIntro(GroupMessage):
    """Build-Clique's Timeout asks w to introduce itself to u (Scheideler's lecture §9.2)."""

    u: Ref
    introducer: int


register_message(AskForIntro, 511, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Introduce(GroupMessage):
    """``Introduce(w)``: here is a relay to w (Scheideler's lecture §9.2)."""

    w: Ref
    introducer: int


register_message(Introduce, 512, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class AskToReverse(GroupMessage):
    """A leaving process asks the sink of ``out`` to reverse their link (Scheideler's lecture
    Leave)."""

    out: Ref


register_message(AskToReverse, 513, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Reverse(GroupMessage):
    """The answer to AskToReverse: a relay back (Scheideler's lecture Leave)."""

    out: Ref


register_message(Reverse, 514, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Feedback(GroupMessage):
    """spec §3.5 (feedback option): the target of an Introduce that ``introducer`` caused
    tells it whether the introduced relay was ``new`` to it (so that introducer weights its
    relay to us up or down)."""

    target: int
    new: bool


register_message(Feedback, 515, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Search(GroupMessage):
    """Search for ``sid`` with at most ``d_left`` random forwards (Scheideler's lecture §9.2
    Search)."""

    sid: int
    origin: int
    d_left: int
    hops: int


register_message(Search, 516, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Pub(GroupMessage):
    """A publication flooded through the group (spec §7): ``seen`` are the members already
    sent a copy, ``hops`` the relay hops it crossed before this chain."""

    pub_id: int
    payload: bytes
    seen: frozenset[int]
    hops: int

    def publication(self) -> int | None:
        return self.pub_id


register_message(Pub, 530, layer="pubsub", payload=True)


# ------------------------------------------------------------------------------ topic history
# Not in Scheideler's lecture: the topic history of late subscribers (docs/history.md;
# docs/protocols/clique.md "Topic history"). Tags 550-551, layer "history".


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class JoinWithHistory(Join):
    """``Join(in)`` that also asks the contact for the topic's retained publications: the
    newest ``count`` (0: all it retains, at most its ``history_items``), none older than
    ``seconds`` (0: no limit). The contact handles the Join part exactly as a Join, then
    answers through the relay the Join gave it (:class:`HistoryPub`)."""

    count: int
    seconds: float


register_message(JoinWithHistory, 550, layer="history")


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPub(GroupMessage):
    """One retained publication, sent by the contact to a member that joined with
    :class:`JoinWithHistory`; ``total``: the publications of that answer (the member stops
    waiting once it has them all); ``age``: seconds since the contact first had it."""

    pub_id: int
    payload: bytes
    total: int
    age: float

    def publication(self) -> int | None:
        return self.pub_id


register_message(HistoryPub, 551, layer="history", payload=True)
