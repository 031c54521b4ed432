"""A chord node's life: its phases and its timers (docs/protocols/chord.md, "Timers").

Every timer carries the incarnation (``life``) that armed it: a rejoin starts a new one
(:meth:`.node.ChordNode._rejoin`), and the timers of the old one are ignored when they fire.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pubmesh.proto.core import Timer


class Phase(enum.StrEnum):
    """Where a node is in its life on the ring (its ``state``; the snapshot shows the value)."""

    IDLE = "idle"
    JOINING = "joining"
    JOINED = "joined"
    LEAVING = "leaving"
    LEFT = "left"


IDLE, JOINING, JOINED, LEAVING, LEFT = Phase  # the phases by their short names, in order


@dataclass(frozen=True, slots=True)
class JoinTick(Timer):
    """Resend the JoinRequest (joining) or the join notice (joined, lookup_tries in all)."""

    life: int
    tick: int


@dataclass(frozen=True, slots=True)
class LookupTimeout(Timer):
    life: int
    rid: int


@dataclass(frozen=True, slots=True)
class RespRetry(Timer):
    life: int
    peer: int
    seq: int


@dataclass(frozen=True, slots=True)
class StabilizeTick(Timer):
    life: int


@dataclass(frozen=True, slots=True)
class FixTick(Timer):
    life: int


@dataclass(frozen=True, slots=True)
class RefreshTick(Timer):
    life: int


@dataclass(frozen=True, slots=True)
class LeaveDone(Timer):
    life: int


@dataclass(frozen=True, slots=True)
class HistoryTick(Timer):
    """Send the history query of ``topic`` (spec §14), if this incarnation is joined."""

    life: int
    topic: str


@dataclass(frozen=True, slots=True)
class HistoryDone(Timer):
    """The window of query ``qid`` on ``topic`` closes (spec §14). It outlives a rejoin:
    ``life`` is the incarnation that sent the query, and the node takes it whatever its
    own."""

    life: int
    topic: str
    qid: int


def backoff(period: float, attempt: int) -> float:
    """The wait before retry ``attempt`` + 1 of a request whose answer may be lost: period/8,
    doubling up to the period (ours; spec §7 retries every join_retry or location_timeout).

    A join's or a lookup's location notification, and a join notice (Terpstra et al. §5.1–5.2),
    travel the tree's edge filters, which while nodes join together may not cover a
    newcomer's maintenance interval yet (its filter wave, §4.4, is still on its way): the
    notification then reaches no owner and nobody answers. Such a loss lasts a filter wave, a
    few round trips, so the first retry comes after period/8 (0.25 s by default) and later
    ones back off to the period: a first retry after the whole period would make each lost
    answer cost 2 s of the ring's settling. (Chord, Stoica et al., SIGCOMM 2001, §4.4 and
    §5.1, leaves the retry of a join's lookup to the implementation.)"""
    return min(period, period / 8 * float(2 ** max(0, attempt)))
