"""Parameters of the ``d2g`` stack: the ``[stack.d2g]`` table (docs/protocols/relay.md §4, §8)."""

from __future__ import annotations

from dataclasses import dataclass

from pubmesh.proto.clique.params import CliqueParams

#: τ, the twins N may hold before a dequeued relay is replaced by a 2-hop one (spec §4):
#: "one" (τ = 1, the slides' rule) or "log" (τ = ⌈ln |N|⌉)
TWIN_BUDGETS = ("one", "log")


@dataclass(frozen=True)
class D2GParams(CliqueParams):
    #: T (spec §8: 0.5 s for d2g)
    timeout: float = 0.5
    #: τ, the twin pairs N may hold before a dequeued relay is replaced by a 2-hop one (spec
    #: §4): "one" (τ = 1, the slides' rule) or "log" (τ = ⌈ln |N|⌉)
    twin_budget: str = "one"
    #: spec §4 [R]: a member nothing points at sends a random out-neighbour Connect(in)
    #: (without it a node with in-degree 0 is never sampled again and the graph collapses)
    repair_in: bool = True
    #: spec §4 [R]: a member with more in-links than out-links passes AskForConnect on, at
    #: most cap_ttl times (without it hubs form)
    cap: bool = True
    cap_ttl: int = 3
    #: every this many T the holders of ``in`` are asked how many relays they hold to it
    #: (Probe): repair_in reads ``in.incoming``, and a count left too high (a corrupted
    #: state's, a holder that dropped its relay without a Release) would switch the repair
    #: off for good (ours; the spec probes only relays that should go)
    in_probe_every: float = 20.0
    #: the slides as written (Scheideler's lecture §9.3): no in-link repair, no cap, no rejoin
    literal: bool = False

    def check(self) -> str | None:
        problem = super().check()
        if problem:
            return problem
        if self.twin_budget not in TWIN_BUDGETS:
            return f"twin_budget must be one of {', '.join(TWIN_BUDGETS)}, got {self.twin_budget!r}"
        if self.in_probe_every < 0:
            return f"in_probe_every must be >= 0, got {self.in_probe_every}"
        if self.cap_ttl < 0:
            return f"cap_ttl must be >= 0, got {self.cap_ttl}"
        return None

    @property
    def repairs(self) -> bool:
        return not self.literal
