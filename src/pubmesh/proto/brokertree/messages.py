"""Wire messages of the brokertree stack (specs/brokertree.md §10; tags 400–499).

Every frame carries its session id and frame number, ``sid`` and ``n`` (spec §2 "Links"): the
simulator's links are not FIFO, and the protocol needs FIFO, loss-free sessions (papers/001
§5.1(ii), §9: TCP), so :mod:`pubmesh.proto.brokertree.session` numbers the frames of each
direction of a session and releases them in order. The fields are declared on each class
rather than inherited, so every message stays one flat frozen dataclass for the codec, the
trace and the compiled build.

Layer "brokertree.ctl" (no payload) for all but ``Pub`` (spec §10).
"""

from __future__ import annotations

from dataclasses import dataclass

from pubmesh.proto.core import Message, register_message

CTL = "brokertree.ctl"


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello(Message):
    """Opens session ``sid`` (frame 0 of the dialer's direction) [P §4.2]: the dialer's
    ``epoch`` (when its incarnation started, spec §2 "Sequence numbers") and ``kind``.

    ``after`` is ours [R], not the spec's: the sid of the dialer's last session with the
    acceptor (0: none). Over non-FIFO links a Hello that lost a simultaneous dial (spec §12.1:
    the lower id's dial is kept) can arrive after the winning session opened, and so can the
    Hello of a peer that ended that session (a suspicion) and dials again; only the second
    names the open session in ``after``, and only it may replace the session."""

    sid: int
    n: int
    epoch: float
    kind: str
    after: int


register_message(Hello, 400, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class HelloAck(Message):
    """Accepts session ``sid`` (frame 0 of the acceptor's direction), with the acceptor's
    ``epoch`` and ``kind``."""

    sid: int
    n: int
    epoch: float
    kind: str


register_message(HelloAck, 401, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reset(Message):
    """ "No such session": the answer to a frame on an unknown or old ``sid`` (a TCP RST,
    spec §2). The sender of that frame treats the session as failed."""

    sid: int
    n: int


register_message(Reset, 402, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat(Message):
    """Keeps an idle session's peer from suspecting us (spec §2: every ``hb_period``)."""

    sid: int
    n: int


register_message(Heartbeat, 403, layer=CTL)
