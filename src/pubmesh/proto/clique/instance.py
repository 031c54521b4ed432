"""One Build-Clique instance: the state a clique node keeps per topic (Scheideler's lecture
chapter 9, §9.2: the relay model's Build-Clique; docs/protocols/relay.md, spec §3).

Its own module because the node (:mod:`.node`) and the parts that run the relay model's
rules on it (:mod:`.build`, :mod:`.leave`, d2g's :mod:`pubmesh.proto.d2g.build`) all read it,
and a part imports no node: the parts are handed an instance and the node's relay operations
(:class:`~.ops.RelayOps`), nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pubmesh.proto.core import NodeId
from pubmesh.proto.relay.layer import Relay

__all__ = ["Instance"]


@dataclass(slots=True)
class Instance:
    """One Build-Clique instance (spec §3 state)."""

    topic: str
    in_: Relay
    #: N and D by rid (N in the order relays entered it)
    n: dict[int, Relay] = field(default_factory=dict)
    d: dict[int, Relay] = field(default_factory=dict)
    leaving: bool = False
    a_out: Relay | None = None
    a_in: Relay | None = None
    stopped: bool = False
    #: delivering to the application (False at the contact and once leaving)
    delivering: bool = True
    #: since when N ∪ D has been empty (rejoin, spec §7)
    empty_since: float | None = None
    #: publication ids seen and when they expire
    seen: dict[int, float] = field(default_factory=dict)
    #: rids in D that a member sent us as its answer to our AskToReverse while we leave with
    #: an anchor: it has reversed already, so it is not asked again (see
    #: LeaveProtocol.leave_timeout)
    reversed: set[int] = field(default_factory=set)
    #: the frame being handled came in through a_in (the anchor's channel)
    via_anchor: bool = False
    #: when a leaver last nudged each holder of its ``in`` (see LeaveProtocol.nudge_holders)
    nudged: dict[NodeId, float] = field(default_factory=dict)
    #: spec §3.5 feedback weights ω of N's relays by rid (1 when absent)
    weights: dict[int, float] = field(default_factory=dict)

    @property
    def key(self) -> int:
        return self.in_.rid

    def relays(self) -> list[Relay]:
        """Every relay of the instance (spec §3 "no relay of the instance has holders")."""
        out = [self.in_, *self.n.values(), *self.d.values()]
        out.extend(r for r in (self.a_out, self.a_in) if r is not None)
        return out

    def holds(self, relay: Relay) -> bool:
        return (
            relay.rid in self.n
            or relay.rid in self.d
            or relay is self.a_out
            or relay is self.a_in
            or relay is self.in_
        )
