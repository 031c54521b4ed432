"""Group messages of the ``clique`` and ``d2g`` stacks (specs/relay.md §8; tags 510–539).

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


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Join(Message):
    """A subscriber's ``Join(in)`` to the contact (papers/002 "Join(u)", spec §7)."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int
    node: Ref


register_message(Join, 510, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class AskForIntro(Message):
    """Build-Clique's Timeout asks w to introduce itself to u (papers/002 §9.2)."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int
    u: Ref
    introducer: int


register_message(AskForIntro, 511, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Introduce(Message):
    """``Introduce(w)``: here is a relay to w (papers/002 §9.2)."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int
    w: Ref
    introducer: int


register_message(Introduce, 512, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class AskToReverse(Message):
    """A leaving process asks the sink of ``out`` to reverse their link (papers/002 Leave)."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int
    out: Ref


register_message(AskToReverse, 513, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Reverse(Message):
    """The answer to AskToReverse: a relay back (papers/002 Leave)."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int
    out: Ref


register_message(Reverse, 514, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Search(Message):
    """Search for ``sid`` with at most ``d_left`` random forwards (papers/002 §9.2 Search)."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int
    sid: int
    origin: int
    d_left: int
    hops: int


register_message(Search, 516, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Pub(Message):
    """A publication flooded through the group (spec §7): ``seen`` are the members already
    sent a copy, ``hops`` the relay hops it crossed before this chain."""

    topic: str
    rid: int
    prev: int
    sink: int
    direct: bool
    hop: int
    pub_id: int
    payload: bytes
    seen: frozenset[int]
    hops: int

    def publication(self) -> int | None:
        return self.pub_id


register_message(Pub, 530, layer="pubsub", payload=True)
