"""Build-Clique's joining part of a clique node: Join, AskForIntro, Introduce, Feedback and
Timeout (Scheideler's lecture §9.2 Build-Clique; spec §3, §3.5). The module essay of
:mod:`pubmesh.proto.clique.node` says how it works.

:class:`BuildClique` is a part the node composes (``node.build``): it holds a reference to its
node and works on the node's state, and the node's hooks (``_on_join``, ``_on_ask_for_intro``,
``_on_introduce``, ``_timeout``) call it, so that a stack built on the clique (d2g) overrides
those hooks on its node class. Everything it does to relays goes through the node (``_send``,
``_delete``, ``_introduce``, ``_leave_timeout``), hooks included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pubmesh.proto.clique.messages import AskForIntro, Feedback
from pubmesh.proto.core import Output, Part
from pubmesh.proto.relay.layer import Relay

if TYPE_CHECKING:
    from pubmesh.proto.clique.node import CliqueNode, Instance


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


class BuildClique(Part["CliqueNode"]):
    """Build-Clique's Join / introduce / Timeout logic of one :class:`CliqueNode` (module
    docstring)."""

    __slots__ = ()

    def __init__(self, node: CliqueNode) -> None:
        super().__init__(node)

    def on_join(self, instance: Instance, u: Relay, now: float, out: list[Output]) -> None:
        """Join(u) [P]: N += u; with join_intro (spec §3 [R]) also u ← Introduce(in)."""
        node = self.n
        if u.sink == node.node_id:
            return
        if node.params.join_intro and not instance.leaving:
            node._send(u, node._introduce(instance, instance.in_, node.node_id), now, out)
        if instance.leaving:
            instance.d[u.rid] = u
        else:
            instance.n[u.rid] = u

    def on_ask_for_intro(
        self, instance: Instance, u: Relay, introducer: Any, now: float, out: list[Output]
    ) -> None:
        """AskForIntro(u) [P]: if u.sink = self: delete u; elif leaving: N += u (kept for the
        reversal); else u ← Introduce(in); delete u. The Introduce names the member whose
        Timeout asked (spec §3.5: AskForIntro and Introduce carry ``introducer``)."""
        node = self.n
        if u.sink == node.node_id:
            return  # deleted by the caller (not held)
        if instance.leaving:
            instance.n[u.rid] = u
            return
        who = introducer if type(introducer) is int else node.node_id
        node._send(u, node._introduce(instance, instance.in_, who), now, out)

    def on_introduce(
        self, instance: Instance, w: Relay, introducer: Any, now: float, out: list[Output]
    ) -> None:
        """Introduce(w) [P]: keep w if it is not to ourselves and not redundant in N; direct
        relays go to N, indirect ones to D (to be delegated). With ``feedback`` (spec §3.5),
        tell the introducer whether w was new, through our relay to it if we hold one."""
        node = self.n
        new = self.keep_introduced(instance, w)
        if node.params.feedback and type(introducer) is int and introducer != node.node_id:
            back = next((x for x in instance.n.values() if x.sink == introducer), None)
            if back is not None:
                feedback = Feedback(
                    topic=instance.topic, rid=0, prev=0, sink=0, direct=False, hop=0,
                    target=node.node_id, new=new,
                )  # fmt: skip
                node._send(back, feedback, now, out)

    def keep_introduced(self, instance: Instance, w: Relay) -> bool:
        node = self.n
        if w.sink == node.node_id:
            return False
        same = [x for x in instance.n.values() if x.sink == w.sink]
        if same and not (w.direct and not any(x.direct for x in same)):
            return False
        if w.direct:
            instance.n[w.rid] = w
        else:
            instance.d[w.rid] = w
        return True

    def on_feedback(self, instance: Instance, target: Any, new: Any) -> None:
        """spec §3.5: ω of our relay to ``target`` doubles if the introduction was new, else
        halves, clamped to [1/(4(|N| + 1)), 1]."""
        node = self.n
        if not node.params.feedback or type(target) is not int:
            return
        relay = next((x for x in instance.n.values() if x.sink == target), None)
        if relay is None:
            return
        low = 1.0 / (4 * (len(instance.n) + 1))
        weight = instance.weights.get(relay.rid, 1.0)
        weight = weight * 2 if new is True else weight / 2
        instance.weights[relay.rid] = min(1.0, max(low, weight))

    def timeout(self, instance: Instance, now: float, out: list[Output]) -> None:
        """Timeout [P] (Scheideler's lecture §9.2 Build-Clique)."""
        node = self.n
        group = list(instance.n.values())
        # N's relays by sink, kept equal to N as the loop moves them out: redundant() needs
        # only the relays of one sink, and a scan of all of N per relay made the timeout
        # quadratic in |N| (most of a 200-node clique's run)
        by_sink = _by_sink(instance.n.values())
        for relay in sorted(group, key=lambda r: r.rid):
            if relay.sink == node.node_id:
                # a relay to ourselves (a corrupted state's; the handlers never keep one)
                del instance.n[relay.rid]
                node._delete(relay, now, out)
                by_sink = _by_sink(instance.n.values())  # deleting may forget other relays
            elif not relay.direct or redundant(relay, by_sink.get(relay.sink, ())):
                del instance.n[relay.rid]
                instance.d[relay.rid] = relay
                same = by_sink[relay.sink]
                same[:] = [x for x in same if x is not relay]
        if instance.leaving:
            node._leave_timeout(instance, now, out)
            return
        # [R] garbage anchors while not leaving (spec §3)
        if instance.a_out is not None:
            instance.d[instance.a_out.rid] = instance.a_out
            instance.a_out = None
        if instance.a_in is not None:
            node._delete(instance.a_in, now, out)
            instance.a_in = None
        members = sorted(instance.n)
        if members:
            u = instance.n[self.draw_u(instance, members)]
            choices = [*members, 0]
            pick = choices[node.rng.randrange(len(choices))]
            ask = AskForIntro(
                topic=instance.topic,
                rid=0,
                prev=0,
                sink=0,
                direct=False,
                hop=0,
                u=node.layer.ref(u),
                introducer=node.node_id,
            )
            if pick == 0:
                # w = in: a local call; its effect is u ← Introduce(in)
                node._send(u, node._introduce(instance, instance.in_, node.node_id), now, out)
            else:
                node._send(instance.n[pick], ask, now, out)
        for rid in sorted(instance.d):
            relay = instance.d[rid]
            if not relay.incoming:
                node._send(relay, node._introduce(instance, instance.in_, node.node_id), now, out)
                del instance.d[rid]
                node._delete(relay, now, out)

    def draw_u(self, instance: Instance, members: list[int]) -> int:
        """Timeout's u := random(N): uniform, or ∝ ω with ``feedback`` (spec §3.5)."""
        node = self.n
        if not node.params.feedback:
            return members[node.rng.randrange(len(members))]
        weights = instance.weights
        if len(weights) > 2 * len(members):
            instance.weights = weights = {r: w for r, w in weights.items() if r in instance.n}
        total = sum(weights.get(r, 1.0) for r in members)
        x = node.rng.random() * total
        for rid in members:
            x -= weights.get(rid, 1.0)
            if x < 0:
                return rid
        return members[-1]
