"""Leave, the reverse protocol of a clique node (Scheideler's lecture §9.2 Leave; spec §3:
phase 1 [P], phase 2 the anchor repair [R]). The module essay of
:mod:`pubmesh.proto.clique.node` says how it works.

:class:`LeaveProtocol` is held by the node (``node.leave_protocol``), which hands itself to
each call as ``ops``: everything the protocol does to relays goes through
:class:`~pubmesh.proto.clique.ops.RelayOps` (send, delete, apply, stop), so it sees a stack
built on the clique (d2g) as that stack's node does; the node's ``leave_timeout`` calls
:meth:`LeaveProtocol.leave_timeout`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubmesh.proto.clique.messages import AskToReverse, Reverse
from pubmesh.proto.core import Output, Send
from pubmesh.proto.relay.layer import Outcome, Relay
from pubmesh.proto.relay.messages import Nudge

if TYPE_CHECKING:
    from pubmesh.proto.clique.instance import Instance
    from pubmesh.proto.clique.ops import RelayOps


class LeaveProtocol:
    """Leave and its reversal (AskToReverse / Reverse, LeaveTimeout, the holders' nudges)
    (module docstring); stateless, so one instance serves every node."""

    __slots__ = ()

    def leave(self, ops: RelayOps, instance: Instance, now: float) -> None:
        """Leave() [P]: leaving := true; a_in := a new IN relay (spec §3 [R]: the slides
        never assign it). Delivery stops at once."""
        instance.leaving = True
        instance.delivering = False
        if instance.a_in is None:
            instance.a_in = ops.layer.new_in(instance.topic, now)
        ops.count("leaves")

    def reverse_ask(self, ops: RelayOps, instance: Instance, relay: Relay) -> AskToReverse:
        return AskToReverse(
            topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
            out=ops.layer.ref(relay),
        )  # fmt: skip

    def reverse(self, ops: RelayOps, instance: Instance, relay: Relay) -> Reverse:
        return Reverse(
            topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
            out=ops.layer.ref(relay),
        )  # fmt: skip

    def leave_timeout(
        self, ops: RelayOps, instance: Instance, now: float, out: list[Output]
    ) -> None:
        """LeaveTimeout (spec §3; phase 1 [P], phase 2 the anchor repair [R])."""
        if not instance.n and not instance.d and not any(r.incoming for r in instance.relays()):
            ops.stop(instance, now, out)
            return
        for rid in sorted(instance.n):
            instance.d[rid] = instance.n.pop(rid)
        if instance.a_out is not None and not instance.a_out.direct:
            instance.d[instance.a_out.rid] = instance.a_out
            instance.a_out = None
        anchor = instance.a_out
        slides = ops.params.leave_phase2 == "slides"
        instance.reversed &= instance.d.keys()
        for rid in sorted(instance.d):
            relay = instance.d[rid]
            if relay.incoming:
                continue
            if rid in instance.reversed and instance.in_.incoming and not slides:
                # its sink answered our AskToReverse already: asking again every round hands
                # out `in` every round, and an `in` counted towards that member each round is
                # never probed (grace), so a stale count on it (a corrupted state's) keeps
                # in.incoming true and the leaver in phase 1 for ever (found by C1 `sets`).
                # It waits here for in.incoming to clear, then gets the anchor (ours)
                continue
            if anchor is not None and relay.sink == anchor.sink and not slides:
                # spec §3 skips these; every anchor probe brings one more (the anchor answers
                # Reverse(in), filed in D), so skipped they pile up and N = D = ∅ never holds.
                # The anchor link itself is a_out: a second relay to it is redundant (ours)
                del instance.d[rid]
                ops.delete(relay, now, out)
                continue
            if anchor is None or instance.in_.incoming or slides:
                ops.send(relay, self.reverse_ask(ops, instance, instance.in_), now, out)
            else:
                ops.send(relay, self.reverse(ops, instance, anchor), now, out)
            del instance.d[rid]
            ops.delete(relay, now, out)
        if instance.a_out is not None and instance.a_in is not None and not instance.a_in.incoming:
            ops.send(instance.a_out, self.reverse_ask(ops, instance, instance.a_in), now, out)
        if not slides and instance.in_.incoming:
            self.nudge_holders(ops, instance, now, out)

    def nudge_holders(
        self, ops: RelayOps, instance: Instance, now: float, out: list[Output]
    ) -> None:
        """Phase 1 asks the members we have relays to; a member that points at our ``in``
        without one (a state mid-convergence) would be reached only when its own Timeout
        happens to pick u = its relay to us and w = its ``in``: once in about |N|² rounds
        (found by C4 from random_graph). So each holder of ``in`` we cannot reach is nudged,
        at most once per probe_after, and introduces itself (ours)."""
        reach = {r.sink for r in (*instance.n.values(), *instance.d.values())}
        every = ops.params.probe_after * ops.params.timeout
        outcome = Outcome()
        for holder in sorted(instance.in_.holders):
            if holder == ops.node_id or holder in reach:
                continue
            if now - instance.nudged.get(holder, -1e18) < every:
                continue
            instance.nudged[holder] = now
            outcome.sends.append(Send(holder, Nudge(rid=instance.in_.rid)))
        ops.apply(outcome, now, out)

    def on_ask_to_reverse(
        self, ops: RelayOps, instance: Instance, relay: Relay, now: float, out: list[Output]
    ) -> None:
        """AskToReverse(out) [P]."""
        for rid in sorted(instance.n):
            if instance.n[rid].sink == relay.sink:
                instance.d[rid] = instance.n.pop(rid)
        if not instance.leaving:
            ops.send(relay, self.reverse(ops, instance, instance.in_), now, out)
        elif instance.a_out is None:
            # [P] answers at once with out ← AskToReverse(in); two leavers would then bounce
            # it between them with no pause at all. Filed in D, it is asked at the next
            # LeaveTimeout instead: the same message, once per round (ours; the slides'
            # literal answer with leave_phase2 = "slides")
            if ops.params.leave_phase2 == "slides":
                ops.send(relay, self.reverse_ask(ops, instance, instance.in_), now, out)
            else:
                instance.d[relay.rid] = relay
        elif relay.sink == instance.a_out.sink:
            instance.d[instance.a_out.rid] = instance.a_out
            instance.a_out = None
        else:
            ops.send(relay, self.reverse(ops, instance, instance.a_out), now, out)

    def on_reverse(
        self, ops: RelayOps, instance: Instance, relay: Relay, now: float, out: list[Output]
    ) -> None:
        """Reverse(out) [P]."""
        if relay.sink == ops.node_id:
            return
        if not instance.leaving:
            instance.n[relay.rid] = relay
        elif (
            instance.a_out is not None
            and instance.via_anchor
            and relay.sink != instance.a_out.sink
            and ops.params.leave_phase2 != "slides"
        ):
            # our anchor answered its probe with a relay to someone else: it is leaving too
            # and hands us its own anchor. Keeping it as ours, two leavers feed the stayers
            # links to each other and neither ever stops (found by the model test). It goes
            # to D and we look for a new anchor (phase 1 again; ours)
            instance.d[instance.a_out.rid] = instance.a_out
            instance.a_out = None
            instance.d[relay.rid] = relay
        elif instance.a_out is not None:
            if relay.sink != instance.a_out.sink or ops.params.leave_phase2 == "slides":
                instance.d[relay.rid] = relay
                instance.reversed.add(relay.rid)
            # else: the anchor's answer to our probe, redundant with a_out: not kept (ours,
            # see leave_timeout), so that N = D = ∅ can hold and the leaver stops
        elif relay.direct:
            instance.a_out = relay
        elif ops.params.leave_phase2 == "slides":
            ops.send(relay, self.reverse_ask(ops, instance, instance.in_), now, out)  # [P]
        else:
            instance.d[relay.rid] = relay  # asked at the next LeaveTimeout, as above
