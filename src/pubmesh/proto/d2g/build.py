"""Build-D2G's rules (Scheideler's lecture §9.3; spec §4): the Timeout and handlers by which a
d2g node's group becomes a random digraph of diameter about 2. The module essay of
:mod:`pubmesh.proto.d2g.node` says how they work.

:class:`BuildD2G` keeps the clique's :class:`~pubmesh.proto.clique.ops.BuildRules`
(Build-Clique's Feedback, its own Join, AskForIntro, Introduce and Timeout, and AskForConnect
and Connect besides); the node hands itself to each call as :class:`D2GOps`: the relay operations
every group stack has (:class:`~pubmesh.proto.clique.ops.RelayOps`), d2g's parameters, the
twin budget τ and the in-link repair's choice.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Protocol

from pubmesh.proto.clique.build import BuildClique, drop_anchors
from pubmesh.proto.clique.messages import AskForIntro
from pubmesh.proto.clique.ops import RelayOps
from pubmesh.proto.core import NodeId, Output
from pubmesh.proto.d2g.messages import AskForConnect, Connect
from pubmesh.proto.d2g.params import D2GParams
from pubmesh.proto.relay.layer import Relay

if TYPE_CHECKING:
    from pubmesh.proto.clique.instance import Instance


def twins(group: dict[int, Relay]) -> int:
    """Σ over sinks of C(count, 2) (spec §4)."""
    counts: dict[NodeId, int] = {}
    for relay in group.values():
        counts[relay.sink] = counts.get(relay.sink, 0) + 1
    return sum(k * (k - 1) // 2 for k in counts.values())


def random_member(rng: random.Random, instance: Instance) -> Relay:
    """random(N): a relay of ``instance``'s N, uniformly (by rid order, then the draw)."""
    rids = sorted(instance.n)
    return instance.n[rids[rng.randrange(len(rids))]]


#: Build-Clique's rules, for the Feedback they share
_CLIQUE = BuildClique()


class D2GOps(RelayOps, Protocol):
    """What Build-D2G asks of its node beyond the clique's relay operations."""

    @property
    def d2g(self) -> D2GParams: ...

    def tau(self, instance: Instance) -> int:
        """τ: the twin pairs N may hold before a dequeued relay is replaced (spec §4)."""

    def in_repair(self, instance: Instance) -> Relay | None:
        """The out-relay ``repair_in`` sends ``Connect(in)`` along, or None when none is due."""


class BuildD2G:
    """Build-D2G's rules (module docstring); stateless, so one instance serves every node."""

    __slots__ = ()

    def on_feedback(self, ops: D2GOps, instance: Instance, target: Any, new: Any) -> None:
        """Feedback (spec §3.5), as Build-Clique takes it."""
        _CLIQUE.on_feedback(ops, instance, target, new)

    def ask(self, ops: D2GOps, instance: Instance, relay: Relay) -> AskForIntro:
        return AskForIntro(
            topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
            u=ops.layer.ref(relay), introducer=ops.node_id,
        )  # fmt: skip

    def connect(self, ops: D2GOps, instance: Instance) -> Connect:
        return Connect(
            topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
            w=ops.layer.ref(instance.in_),
        )  # fmt: skip

    def ask_connect(self, ops: D2GOps, instance: Instance, relay: Relay, ttl: int) -> AskForConnect:
        return AskForConnect(
            topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
            u=ops.layer.ref(relay), ttl=ttl,
        )  # fmt: skip

    def on_join(
        self, ops: D2GOps, instance: Instance, u: Relay, now: float, out: list[Output]
    ) -> None:
        """Join(u) (spec §4): enqueue(N, u); with join_intro, u ← Connect(in)."""
        if u.sink == ops.node_id:
            return
        if instance.leaving:
            instance.d[u.rid] = u
            return
        instance.n[u.rid] = u
        if ops.params.join_intro:
            ops.send(u, self.connect(ops, instance), now, out)

    def on_ask_for_intro(
        self,
        ops: D2GOps,
        instance: Instance,
        u: Relay,
        introducer: Any,
        now: float,
        out: list[Output],
    ) -> None:
        """AskForIntro(u) [P]: if u.sink ≠ self and N ≠ ∅: u ← Introduce(random(N)); delete u
        (the caller deletes what the instance does not hold). With N = ∅ the slides delete u
        as well, and that can cut the relay graph: u may be the only link between the asker's
        side and ours (found by the oracle at n = 64). We keep u in N instead: a member
        without out-links takes the asker as its first (ours)."""
        if u.sink == ops.node_id:
            return
        if not instance.n:
            if instance.leaving:
                instance.d[u.rid] = u
            else:
                instance.n[u.rid] = u
            return
        ops.send(
            u, ops.introduction(instance, random_member(ops.rng, instance), ops.node_id), now, out
        )

    def on_introduce(
        self,
        ops: D2GOps,
        instance: Instance,
        w: Relay,
        introducer: Any,
        now: float,
        out: list[Output],
    ) -> None:
        """Introduce(w) [P]: if w.sink ≠ self: w ← AskForConnect(in, cap_ttl); delete w."""
        if w.sink == ops.node_id:
            return
        ops.send(w, self.ask_connect(ops, instance, instance.in_, ops.d2g.cap_ttl), now, out)

    def on_ask_for_connect(
        self, ops: D2GOps, instance: Instance, u: Relay, ttl: int, now: float, out: list[Output]
    ) -> None:
        """AskForConnect(u, ttl) [P, R]: with ``cap`` a member with more in-links than
        out-links passes it to a random out-neighbour while ttl > 0; else u ← Connect(in). A
        leaver files u in D, for reversal (spec §4 deletes it, which can cut the relay graph
        as AskForIntro's can: ours)."""
        if u.sink == ops.node_id:
            return
        if instance.leaving:
            instance.d[u.rid] = u
            return
        indeg = sum(instance.in_.holders.values())
        cap = ops.d2g.cap and not ops.d2g.literal
        if cap and ttl > 0 and indeg > len(instance.n) and instance.n:
            relay = random_member(ops.rng, instance)
            ops.send(relay, self.ask_connect(ops, instance, u, ttl - 1), now, out)
            if (
                u.direct
                and indeg > 2 * len(instance.n)
                and not any(x.sink == u.sink for x in instance.n.values())
            ):
                # more in-links than out-links: keep a link back to the asker too. A group
                # whose members only point at each other while others point at them (a sink
                # component) has no other way to learn of those others: the digraph stays
                # weakly but not strongly connected for good (found by the generated
                # reliability test; ours)
                instance.n[u.rid] = u
        else:
            ops.send(u, self.connect(ops, instance), now, out)

    def on_connect(self, ops: D2GOps, instance: Instance, w: Relay) -> None:
        """Connect(w) [P]: enqueue(N, w); a leaver files it for reversal (spec §4)."""
        if w.sink == ops.node_id:
            return
        if instance.leaving:
            instance.d[w.rid] = w
        else:
            instance.n[w.rid] = w

    def timeout(self, ops: D2GOps, instance: Instance, now: float, out: list[Output]) -> None:
        """Timeout [P, R] (Scheideler's lecture §9.3 Build-D2G; spec §4)."""
        for rid in sorted(instance.n):
            relay = instance.n[rid]
            if relay.sink == ops.node_id:
                del instance.n[rid]  # a corrupted state's relay to ourselves
                ops.delete(relay, now, out)
            elif not relay.direct:
                del instance.n[rid]
                instance.d[rid] = relay
        if instance.leaving:
            ops.leave_timeout(instance, now, out)
            return
        drop_anchors(ops, instance, now, out)  # spec §4: "State: as §3"
        if instance.n:
            # P[N has a twin] at dequeue, against the birthday value (spec §9 C6)
            ops.count("dequeues")
            if twins(instance.n):
                ops.count("dequeues_with_twin")
            rid = next(iter(instance.n))
            relay = instance.n.pop(rid)
            if any(x.sink == relay.sink for x in instance.n.values()):
                ops.delete(relay, now, out)  # a twin: N shrinks
                ops.count("twins_dropped")
            elif twins(instance.n) >= ops.tau(instance):
                instance.d[rid] = relay  # replaced by a random 2-hop neighbour
            else:
                ops.send(relay, self.ask(ops, instance, instance.in_), now, out)
                instance.n[rid] = relay  # back to the tail: N grows
        repair = ops.d2g.repair_in and not ops.d2g.literal
        target = ops.in_repair(instance) if repair else None
        if target is not None:
            ops.send(target, self.connect(ops, instance), now, out)
        for rid in sorted(instance.d):
            relay = instance.d[rid]
            if not relay.incoming:
                ops.send(relay, self.ask(ops, instance, instance.in_), now, out)
                del instance.d[rid]
                ops.delete(relay, now, out)
