"""The d2g node: topic groups as self-stabilizing random digraphs of diameter about 2 in the
relay model (Scheideler's lecture §9.3, Build-D2G; docs/protocols/relay.md §4).

How it works
============
Build-D2G runs on the clique's machinery (:class:`pubmesh.proto.clique.node.CliqueNode`: the
relay layer, instances, Leave with its anchor, Search, flooding, the contact); only the
Timeout and four handlers differ. ``N`` is a FIFO multiset of direct relays (a dict in the
order relays entered it; two relays with the same sink are *twins*). Every ``timeout``:

* non-direct relays move from N to D;
* the head r of N is dequeued. If N still holds a twin of r, r is deleted (N shrinks). Else,
  if N holds at least τ twin pairs, r goes to D (it will be replaced by a random 2-hop
  neighbour). Else r's sink is asked for one of its neighbours (``r ← AskForIntro(in)``) and r
  goes back to the tail (N grows);
* [R] ``repair_in``: if nothing points at our ``in``, a random out-neighbour gets a relay to
  it (``Connect(in)``);
* every relay in D nothing points at is used once more (``AskForIntro(in)``) and deleted.

``AskForIntro`` is answered with a reference to a random relay of N (``Introduce``), a
2-hop neighbour reached through the answerer; the asker sends ``AskForConnect(in)`` along it,
and that neighbour answers ``Connect(in)``: a direct relay, enqueued. [R] ``cap``: a member
with more in-links than out-links passes AskForConnect to a random out-neighbour instead,
at most ``cap_ttl`` times, so no hub collects everyone.

The size of N settles where growth (a twin-free step, probability ≈ e^{−m²/2n}) balances
shrinking (a dequeued twin, ≈ m/n): m ≈ √(n ln n), not the slides' conjectured O(√n) (spec
§4: a random out-degree-m digraph has diameter 2 only for m ≥ √(2n ln n)); what it reaches is
measured, not claimed. ``literal = true`` runs the slides as written, without the in-link
repair, the cap and the rejoin: a node nobody points at is never sampled again and the graph
collapses (at n = 256, 253 nodes with in-degree 0, spec §4).

Pub/sub is the clique's flooding over N ∪ D ∪ {a_out}: once legitimate, a publication takes
as many hops as the directed distance, ≤ 2 for nearly all pairs.

Topic history (an addition, not in the lecture) is the clique's, unchanged: the contact
retains each topic's publications and answers a ``JoinWithHistory`` with them (the clique
node's module essay; docs/protocols/d2g.md "Topic history").

The rule that keeps it correct
==============================
The clique's, unchanged: nothing is deleted while something points at it, and every
introduction is safe (a node only ever hands out its own ``in``, or a relay that keeps pointing
where it did), so the relay graph stays weakly connected. On top of it, Timeout takes a relay
out of N only into D, where it is used once more before it goes, or as a twin (one to the same
sink stays in N); and [R] ``repair_in`` gives a member nobody points at an in-link, so floods
do not miss it for good.
"""

from __future__ import annotations

import math

from pubmesh.proto.clique.messages import Join
from pubmesh.proto.clique.node import CONTACT, CliqueNode, Instance, contacts, infrastructure
from pubmesh.proto.core import Message, NodeContext, NodeId, Output, StackNode
from pubmesh.proto.d2g.build import BuildD2G, random_member, twins
from pubmesh.proto.d2g.messages import AskForConnect, Connect
from pubmesh.proto.d2g.params import D2GParams
from pubmesh.proto.relay.layer import Outcome, Relay

__all__ = ["CONTACT", "D2GNode", "Join", "contacts", "create", "infrastructure", "twins"]


class D2GNode(CliqueNode):
    """A node of the d2g stack (module essay)."""

    PARAMS = D2GParams
    LAYER = "d2g"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        assert isinstance(self.params, D2GParams)
        self.d2g: D2GParams = self.params
        #: when each instance (by its key) last probed the holders of its ``in``
        self.in_probed: dict[int, float] = {}
        #: when each instance last ran the in-link repair outside its Timeout
        self.repaired: dict[int, float] = {}
        #: Build-D2G's rules in place of Build-Clique's (build.py)
        self.build_d2g = BuildD2G()
        self.build = self.build_d2g

    def _dispatch_more(
        self,
        instance: Instance,
        message: Message,
        refs: dict[str, Relay],
        now: float,
        out: list[Output],
    ) -> None:
        match message:
            case AskForConnect(ttl=ttl):
                u = refs.get("u")
                if u is not None and type(ttl) is int:
                    self.build_d2g.on_ask_for_connect(self, instance, u, ttl, now, out)
            case Connect():
                w = refs.get("w")
                if w is not None:
                    self.build_d2g.on_connect(self, instance, w)

    def apply(self, outcome: Outcome, now: float, out: list[Output]) -> None:
        """The clique's, then the in-link repair at once for an instance whose last in-link
        just went (a Release, an Adopt or a Probe answer): a member nobody points at misses
        every publication until the repair, and waiting for its Timeout leaves it out for
        T/2 on average (ours; spec §4 runs the repair in Timeout only). A crash of the last
        live holder (PeerDown) starts it too: see :meth:`_holders`."""
        super().apply(outcome, now, out)
        if self.d2g.literal or not self.d2g.repair_in:
            return
        for instance in self.instances.values():
            if instance.leaving:
                continue
            target = self.in_repair(instance)
            if target is None:
                continue
            if now - self.repaired.get(instance.key, -1e18) < self.d2g.timeout / 4:
                continue
            self.repaired[instance.key] = now
            self.send(target, self.build_d2g.connect(self, instance), now, out)

    def in_repair(self, instance: Instance) -> Relay | None:
        """The out-relay repair_in sends ``Connect(in)`` along, or None when none is due.

        Spec §4 [R] repairs a member nothing points at: a random relay of N. We also repair a
        member that only one process points at, one its own N points at too, through a relay
        of N to another sink (when N has one). Two members that point only at each other
        while nobody else points at either are a sink component, which every flood from
        outside misses and no rule of the spec breaks up: each of them is pointed at, so the
        spec's repair never fires, and neither can be introduced to anyone else (an
        introducer hands out a relay of its N, and only the other one holds one). The same
        test covers a member whose last relay pointing at it just went while the sink of one
        of its own relays still counts as a holder for the AskForIntro(in) we sent it (a
        reference in transit, until its Release is back). Found by the simulator at jittered
        latency (tests/proto/d2g/test_d2g_figures.py, C9) and on a 12-process cluster under
        load, two members out for 1.1 s (ours). A Connect too many is harmless: the twin it makes is
        dropped at a later dequeue, and the degree figures of C6 do not move."""
        if not instance.n:
            return None
        holders = self._holders(instance)
        if not holders:
            return random_member(self.rng, instance)
        if len(holders) > 1 or not any(r.sink in holders for r in instance.n.values()):
            return None
        others = [rid for rid in sorted(instance.n) if instance.n[rid].sink not in holders]
        if not others:
            return None
        return instance.n[others[self.rng.randrange(len(others))]]

    def _holders(self, instance: Instance) -> set[NodeId]:
        """The live processes that hold a reference to our ``in`` (repair_in's test, spec §4
        [R]), as the relay layer counts them: relays and references in transit alike.

        The relay layer keeps a crashed holder's count for ``grace`` after PeerDown (a
        reference counted towards it may be on its way to another process, whose Adopt moves
        the count there: spec §2.3), and drops it only at the next Probe of ``in``, every
        ``in_probe_every`` T. Reading that count, a member whose last live in-link went while
        a dead holder still counted would see itself pointed at and miss every publication
        until someone happened to connect to it: seen on a 12-process cluster with 3 SIGKILLed, one
        survivor out for 1-4 s (ours). The counts stay as they are; only the repair's
        decision ignores holders reported down."""
        down = self.layer.down
        return {h for h, count in instance.in_.holders.items() if count and h not in down}

    def _probe_more(self, instance: Instance, now: float, outcome: Outcome) -> None:
        """repair_in reads ``in.incoming``: its holders are probed every in_probe_every T."""
        every = self.d2g.in_probe_every * self.d2g.timeout
        if self.d2g.literal or not every or instance.leaving:
            return
        if now - self.in_probed.get(instance.key, -1e18) >= every:
            self.in_probed[instance.key] = now
            self.layer.probe([instance.in_], now, outcome, at_once=True)

    def tau(self, instance: Instance) -> int:
        """τ (D2GOps): 1, or ⌈ln |N|⌉ with ``twin_budget = "log"``."""
        if self.d2g.twin_budget == "log":
            return max(1, math.ceil(math.log(max(len(instance.n), 1))))
        return 1

    def _rejoins(self) -> bool:
        return not self.d2g.literal


def create(ctx: NodeContext) -> StackNode:
    return D2GNode(ctx)
