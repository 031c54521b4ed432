"""Wire messages of the relay layer (docs/protocols/relay.md §2.3, §8; tags 500–509).

A :class:`Ref` travels inside group messages: a reference to one of the sender's relays (or,
forwarded, to someone else's). The receiver never keeps the Ref itself; the relay layer turns it
into a fresh OUT relay pointing at the referenced one (Scheideler's lecture, "u is newly created, so
no incoming links"; spec §2.1). The other messages are the layer's own bookkeeping: Release (a
holder dropped its relay), Probe / HoldCount (an owner asks its holders how many relays they still
have pointing at its relays), RelayGone (the relay a frame was sent to does not exist), SinkFix (a
relay's cached sink or ``direct`` claim was wrong) and Adopt (a reference reached another process
than the one its owner counted it towards).
"""

from __future__ import annotations

from dataclasses import dataclass

from pubmesh.proto.core import Message, register_message

RELAY = "relay"


@dataclass(frozen=True, slots=True, kw_only=True)
class Ref(Message):
    """A reference to relay ``rid`` held by ``owner``, whose chain ends at ``sink``;
    ``is_in``: it is ``owner``'s own IN relay, so a relay materialized from it is direct;
    ``holder``: the process the owner counted it towards when sending it (the sending relay's
    cached sink; -1 until sent). A receiver that is not ``holder`` sends an :class:`Adopt`."""

    owner: int
    rid: int
    sink: int
    is_in: bool
    holder: int = -1
    #: the owner's probe epoch for ``holder`` when it counted the reference (see Probe)
    epoch: int = 0


register_message(Ref, 500, layer=RELAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Release(Message):
    """The sender dropped its relay ``prev`` that pointed at our relay ``rid``, after sending
    ``sent`` frames through it: one holder fewer once those frames have all arrived (so a
    Release never overtakes data, spec §2.3)."""

    rid: int
    prev: int
    sent: int
    #: an Adopt for (sender, prev) precedes it: apply it only once that Adopt has arrived
    adopted: bool = False
    #: the probe epoch of the count it undoes (see Probe)
    epoch: int = 0


register_message(Release, 501, layer=RELAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe(Message):
    """How many relays do you hold that point at these relays of mine? (spec §2.3)

    Each probe starts a new *epoch* of the owner's count for that holder (``epochs``,
    parallel to ``rids``): the answer replaces the count, so a Release, or an Adopt taking a
    count away, that was sent under an older epoch is already reflected in it and is ignored
    when it arrives after; references counted since the probe was sent are added to the
    answer. The holder stamps its relays with the new epoch."""

    rids: tuple[int, ...]
    epochs: tuple[int, ...] = ()


register_message(Probe, 502, layer=RELAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldCount(Message):
    """The answer to a Probe: (rid, relays pointing at it) for each probed rid."""

    pairs: tuple[tuple[int, int], ...]
    #: the epoch each answer is for (parallel to ``pairs``)
    epochs: tuple[int, ...] = ()


register_message(HoldCount, 503, layer=RELAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayGone(Message):
    """The frame sent through your relay ``rid`` hit a relay that does not exist: kill it."""

    rid: int


register_message(RelayGone, 504, layer=RELAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkFix(Message):
    """Your relay ``rid`` ends at ``sink`` and is ``direct`` or not (its cache was wrong)."""

    rid: int
    sink: int
    direct: bool


register_message(SinkFix, 505, layer=RELAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Adopt(Message):
    """A reference to our relay ``rid`` that we counted towards ``was`` reached the sender
    instead (``was``'s cached sink was wrong, or a chain changed): the count moves from ``was``
    to the sender, who now holds relay ``prev``. ``prev = 0``: no relay was made (the frame
    met a missing relay or a zombie), so ``was``'s count just goes (spec §2.3 counts; the
    spec's header ``sink`` cannot say whom a reference was counted towards once a relay on
    the way rewrote it)."""

    rid: int
    prev: int
    was: int
    #: the epoch the reference was counted towards ``was`` in (see Probe)
    epoch: int = 0


register_message(Adopt, 506, layer=RELAY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Nudge(Message):
    """The owner of relay ``rid`` asks a holder to speak through the relays it holds that
    point there (a leaver reaching the members that point at its ``in`` but that it has no
    relay to; the holder-directed channel of Probe, spec §2.3)."""

    rid: int


register_message(Nudge, 507, layer=RELAY)
