"""Build-Clique's joining part of a clique node: Join, AskForIntro, Introduce, Feedback and
Timeout (Scheideler's lecture §9.2 Build-Clique; spec §3, §3.5). The module essay of
:mod:`pubmesh.proto.clique.node` says how it works.

:class:`BuildClique` keeps :class:`~pubmesh.proto.clique.ops.BuildRules`: the node holds it
(``node.build``) and hands itself to each call as ``ops``, and everything the rules do to
relays goes through :class:`~pubmesh.proto.clique.ops.RelayOps` (send, delete, introductions,
LeaveTimeout). A stack built on the clique (d2g) gives its node other rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pubmesh.proto.clique.messages import AskForIntro, Feedback
from pubmesh.proto.core import Output
from pubmesh.proto.relay.layer import Relay

if TYPE_CHECKING:
    from pubmesh.proto.clique.instance import Instance
    from pubmesh.proto.clique.ops import RelayOps


def redundant(relay: Relay, group: Iterable[Relay]) -> bool:
    """spec §2.2: another relay of ``group`` reaches the same sink and comes first (direct,
    then older, then by rid)."""
    mine = relay.key_order()
    return any(x is not relay and x.sink == relay.sink and x.key_order() < mine for x in group)


def _by_sink(relays: Iterable[Relay]) -> dict[Any, list[Relay]]:
    out: dict[Any, list[Relay]] = {}
    for relay in relays:
        out.setdefault(relay.sink, []).append(relay)
    return out


def drop_anchors(ops: RelayOps, instance: Instance, now: float, out: list[Output]) -> None:
    """[R] garbage anchors while not leaving (spec §3, for Build-Clique's Timeout and
    Build-D2G's alike): ``a_out`` goes to D, to be delegated, and ``a_in`` is deleted."""
    if instance.a_out is not None:
        instance.d[instance.a_out.rid] = instance.a_out
        instance.a_out = None
    if instance.a_in is not None:
        ops.delete(instance.a_in, now, out)
        instance.a_in = None


class BuildClique:
    """Build-Clique's Join / introduce / Timeout rules (module docstring); stateless, so one
    instance serves every node."""

    __slots__ = ()

    def on_join(
        self, ops: RelayOps, instance: Instance, u: Relay, now: float, out: list[Output]
    ) -> None:
        """Join(u) [P]: N += u; with join_intro (spec §3 [R]) also u ← Introduce(in)."""
        if u.sink == ops.node_id:
            return
        if ops.params.join_intro and not instance.leaving:
            ops.send(u, ops.introduction(instance, instance.in_, ops.node_id), now, out)
        if instance.leaving:
            instance.d[u.rid] = u
        else:
            instance.n[u.rid] = u

    def on_ask_for_intro(
        self,
        ops: RelayOps,
        instance: Instance,
        u: Relay,
        introducer: Any,
        now: float,
        out: list[Output],
    ) -> None:
        """AskForIntro(u) [P]: if u.sink = self: delete u; elif leaving: N += u (kept for the
        reversal); else u ← Introduce(in); delete u. The Introduce names the member whose
        Timeout asked (spec §3.5: AskForIntro and Introduce carry ``introducer``)."""
        if u.sink == ops.node_id:
            return  # deleted by the caller (not held)
        if instance.leaving:
            instance.n[u.rid] = u
            return
        who = introducer if type(introducer) is int else ops.node_id
        ops.send(u, ops.introduction(instance, instance.in_, who), now, out)

    def on_introduce(
        self,
        ops: RelayOps,
        instance: Instance,
        w: Relay,
        introducer: Any,
        now: float,
        out: list[Output],
    ) -> None:
        """Introduce(w) [P]: keep w if it is not to ourselves and not redundant in N; direct
        relays go to N, indirect ones to D (to be delegated). With ``feedback`` (spec §3.5),
        tell the introducer whether w was new, through our relay to it if we hold one."""
        new = self.keep_introduced(ops, instance, w)
        if ops.params.feedback and type(introducer) is int and introducer != ops.node_id:
            back = next((x for x in instance.n.values() if x.sink == introducer), None)
            if back is not None:
                feedback = Feedback(
                    topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
                    target=ops.node_id, new=new,
                )  # fmt: skip
                ops.send(back, feedback, now, out)

    def keep_introduced(self, ops: RelayOps, instance: Instance, w: Relay) -> bool:
        if w.sink == ops.node_id:
            return False
        same = [x for x in instance.n.values() if x.sink == w.sink]
        if same and not (w.direct and not any(x.direct for x in same)):
            return False
        if w.direct:
            instance.n[w.rid] = w
        else:
            instance.d[w.rid] = w
        return True

    def on_feedback(self, ops: RelayOps, instance: Instance, target: Any, new: Any) -> None:
        """spec §3.5: ω of our relay to ``target`` doubles if the introduction was new, else
        halves, clamped to [1/(4(|N| + 1)), 1]."""
        if not ops.params.feedback or type(target) is not int:
            return
        relay = next((x for x in instance.n.values() if x.sink == target), None)
        if relay is None:
            return
        low = 1.0 / (4 * (len(instance.n) + 1))
        weight = instance.weights.get(relay.rid, 1.0)
        weight = weight * 2 if new is True else weight / 2
        instance.weights[relay.rid] = min(1.0, max(low, weight))

    def timeout(self, ops: RelayOps, instance: Instance, now: float, out: list[Output]) -> None:
        """Timeout [P] (Scheideler's lecture §9.2 Build-Clique)."""
        group = list(instance.n.values())
        # N's relays by sink, kept equal to N as the loop moves them out: redundant() needs
        # only the relays of one sink, and a scan of all of N per relay made the timeout
        # quadratic in |N| (most of a 200-node clique's run)
        by_sink = _by_sink(instance.n.values())
        for relay in sorted(group, key=lambda r: r.rid):
            if relay.sink == ops.node_id:
                # a relay to ourselves (a corrupted state's; the handlers never keep one)
                del instance.n[relay.rid]
                ops.delete(relay, now, out)
                by_sink = _by_sink(instance.n.values())  # deleting may forget other relays
            elif not relay.direct or redundant(relay, by_sink.get(relay.sink, ())):
                del instance.n[relay.rid]
                instance.d[relay.rid] = relay
                same = by_sink[relay.sink]
                same[:] = [x for x in same if x is not relay]
        if instance.leaving:
            ops.leave_timeout(instance, now, out)
            return
        drop_anchors(ops, instance, now, out)
        members = sorted(instance.n)
        if members:
            u = instance.n[self.draw_u(ops, instance, members)]
            choices = [*members, 0]
            pick = choices[ops.rng.randrange(len(choices))]
            ask = AskForIntro(
                topic=instance.topic,
                rid=0,
                prev=0,
                sink=0,
                direct=False,
                hop=0,
                u=ops.layer.ref(u),
                introducer=ops.node_id,
            )
            if pick == 0:
                # w = in: a local call; its effect is u ← Introduce(in)
                ops.send(u, ops.introduction(instance, instance.in_, ops.node_id), now, out)
            else:
                ops.send(instance.n[pick], ask, now, out)
        for rid in sorted(instance.d):
            relay = instance.d[rid]
            if not relay.incoming:
                ops.send(relay, ops.introduction(instance, instance.in_, ops.node_id), now, out)
                del instance.d[rid]
                ops.delete(relay, now, out)

    def draw_u(self, ops: RelayOps, instance: Instance, members: list[int]) -> int:
        """Timeout's u := random(N): uniform, or ∝ ω with ``feedback`` (spec §3.5)."""
        if not ops.params.feedback:
            return members[ops.rng.randrange(len(members))]
        weights = instance.weights
        if len(weights) > 2 * len(members):
            instance.weights = weights = {r: w for r, w in weights.items() if r in instance.n}
        total = sum(weights.get(r, 1.0) for r in members)
        x = ops.rng.random() * total
        for rid in members:
            x -= weights.get(rid, 1.0)
            if x < 0:
                return rid
        return members[-1]
