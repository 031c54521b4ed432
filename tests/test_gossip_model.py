"""Model-based tests of the gossip stack: Hypothesis drives a small cluster of GossipNodes.

The model is a cluster of 4–8 :class:`~pubmesh.proto.gossip.GossipNode` objects with its own
message pool and timer list (no simulator). Node 0 is the contact (every node gets
``Start(contacts=(0,))``). The rules interleave, in any order Hypothesis picks:

* subscribe a node to the topic; publish from a subscribed node; publish from a node outside
  the topic (it joins as a relay, which must never deliver);
* deliver a pending message. HyParView assumes TCP channels between active neighbours (the
  DSN 2007 paper uses TCP both as reliable FIFO transport and as its failure detector), so in
  :class:`GossipMachine` (test ``TestFifoCluster``) delivery is FIFO within each (src, dst)
  link and random across links; :class:`ReorderingMachine` (``TestReorderingCluster``)
  delivers any pending message (as the simulator's per-message latency can), and checks every
  invariant except symmetry;
* fire a pending timer, in any order (the model has no clock, so a join timeout may fire
  while the Join or its JoinReply is still in flight:
  :func:`test_join_timeout_before_join_reply_keeps_links_symmetric` is the sequence that
  found hyparview.py silently dropping the member it was joining);
* break a TCP connection: every message in flight on the link (both directions) is lost and
  both ends get ``PeerDown`` of the other;
* duplicate a pending message (the FIFO machine duplicates only broadcast-layer messages,
  which TCP never duplicates either but Plumtree must tolerate; the reordering machine
  duplicates any message);
* crash a non-contact node: the failure detector gives ``PeerDown`` to every live node whose
  ``monitored_peers()`` contains it (checked after every step, so a node that later links to
  it learns too); messages to it vanish and a later send to it yields ``PeerDown`` at the
  sender.

Invariants after every step: no node in its own views, view sizes within bounds, no duplicate
within a view, active and passive disjoint, no publication delivered twice at a node, and
Plumtree's eager and lazy peers disjoint and inside the active view. The ``quiesce`` rule
drains every pending message (no faults, no timers) and, in the FIFO machine, checks that the
active views are symmetric among the live members.
"""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from pubmesh.proto.core import (
    MESSAGE_INFO,
    Deliver,
    Input,
    Message,
    NodeContext,
    PeerDown,
    Publish,
    Receive,
    Send,
    SetTimer,
    Start,
    Subscribe,
    Timer,
    TimerFired,
)
from pubmesh.proto.gossip import GossipNode, GossipParams, SwarmTimer
from pubmesh.proto.gossip.hyparview import JoinTimeout

TOPIC = "t"
PARAMS = GossipParams(
    fanout=2,  # active view 3: small enough that a 4–8 node swarm fills it and evicts
    passive_view=4,
    arwl=3,
    prwl=1,
    shuffle_ka=2,
    shuffle_kp=2,
    directory_size=3,
    optimization_threshold=1,
)
DRAIN_LIMIT = 20_000


class Cluster:
    """The nodes, the message pool (in send order) and the pending timers."""

    def __init__(self, size: int, seed: int, fifo: bool) -> None:
        self.fifo = fifo
        self.nodes = {
            i: GossipNode(NodeContext(i, random.Random(seed * 1000 + i), "peer", PARAMS))
            for i in range(size)
        }
        self.crashed: set[int] = set()
        self.pending: list[tuple[int, int, Message]] = []
        self.timers: list[tuple[int, Timer]] = []
        self.delivered: dict[int, set[int]] = {i: set() for i in self.nodes}
        self.next_pub = 0
        for i in self.nodes:
            self.run(i, Start((0,)))

    @property
    def live(self) -> list[int]:
        return [i for i in sorted(self.nodes) if i not in self.crashed]

    def run(self, node: int | None, event: Input | None) -> None:
        """Hand ``event`` to ``node``, then everything it causes locally (PeerDown notices);
        with no event, only run the failure detector."""
        work: list[tuple[int, Input]] = []
        if node is not None and event is not None:
            work.append((node, event))
        for _ in range(DRAIN_LIMIT):
            while work:
                at, ev = work.pop(0)
                if at in self.crashed:
                    continue
                for out in self.nodes[at].handle(ev, 0.0):
                    if isinstance(out, Send):
                        if out.dst in self.crashed:
                            work.append((at, PeerDown(out.dst)))
                        else:
                            self.pending.append((at, out.dst, out.message))
                    elif isinstance(out, SetTimer):
                        self.timers.append((at, out.timer))
                    elif isinstance(out, Deliver):
                        swarm = self.nodes[at].swarms.get(out.topic)
                        assert swarm is not None and swarm.delivering, f"relay {at} delivered"
                        got = self.delivered[at]
                        assert out.pub_id not in got, f"node {at} delivered {out.pub_id} twice"
                        got.add(out.pub_id)
            # the failure detector watches every monitored link continuously
            for at in self.live:
                for peer in sorted(self.nodes[at].monitored_peers()):
                    if peer in self.crashed:
                        work.append((at, PeerDown(peer)))
            if not work:
                return
        raise AssertionError(f"PeerDown does not stop {sorted({at for at, _ in work})} monitoring")

    def crash(self, victim: int) -> None:
        """``victim`` stops: messages to it vanish, its timers die, its monitors learn."""
        self.crashed.add(victim)
        self.pending = [m for m in self.pending if m[1] != victim]
        self.timers = [t for t in self.timers if t[0] != victim]
        self.run(None, None)

    def deliverable(self) -> list[int]:
        """Indices of pending messages that may be delivered next."""
        if not self.fifo:
            return list(range(len(self.pending)))
        heads: dict[tuple[int, int], int] = {}
        for index, (src, dst, _) in enumerate(self.pending):
            heads.setdefault((src, dst), index)
        return sorted(heads.values())

    def deliver(self, index: int) -> None:
        src, dst, msg = self.pending.pop(index)
        self.run(dst, Receive(src, msg))

    def drain(self) -> None:
        for _ in range(DRAIN_LIMIT):
            if not self.pending:
                return
            self.deliver(self.deliverable()[0])
        raise AssertionError(f"messages still in flight after {DRAIN_LIMIT} deliveries")

    def check_views(self) -> None:
        for i in self.live:
            for topic, swarm in self.nodes[i].swarms.items():
                active, passive = swarm.membership.active, swarm.membership.passive
                where = f"node {i} topic {topic}: active {active} passive {passive}"
                assert i not in active and i not in passive, where
                assert len(active) <= PARAMS.active_size, where
                assert len(passive) <= PARAMS.passive_view, where
                assert len(set(active)) == len(active), where
                assert len(set(passive)) == len(passive), where
                assert not set(active) & set(passive), where
                eager, lazy = swarm.broadcast.eager, swarm.broadcast.lazy
                assert eager | lazy <= set(active), f"{where} eager {eager} lazy {lazy}"
                assert not eager & lazy, f"{where} eager {eager} lazy {lazy}"

    def check_symmetric(self) -> None:
        for p in self.live:
            swarm = self.nodes[p].swarms.get(TOPIC)
            if swarm is None:
                continue
            for q in swarm.membership.active:
                assert q not in self.crashed, f"node {p} keeps crashed node {q} active"
                other = self.nodes[q].swarms.get(TOPIC)
                assert other is not None and p in other.membership.active, (
                    f"one-sided link: {q} in active({p}) = {swarm.membership.active}, "
                    f"active({q}) = {other.membership.active if other else None}"
                )


class GossipMachine(RuleBasedStateMachine):
    FIFO = True

    def __init__(self) -> None:
        super().__init__()
        self.c: Cluster = Cluster(4, 0, self.FIFO)
        self.since_quiesce = 0

    @initialize(size=st.integers(4, 8), seed=st.integers(0, 2**16), initial=st.integers(0, 8))
    def setup(self, size: int, seed: int, initial: int) -> None:
        """A fresh cluster; the first ``initial`` nodes subscribe at once (nothing delivered
        yet), so most runs start with several concurrent joins."""
        self.c = Cluster(size, seed, self.FIFO)
        for i in range(min(initial, size)):
            self.c.run(i, Subscribe(TOPIC))

    @rule(pick=st.integers(0, 7))
    def subscribe(self, pick: int) -> None:
        c = self.c
        outside = [i for i in c.live if TOPIC not in c.nodes[i].subscriptions()]
        if outside:
            c.run(outside[pick % len(outside)], Subscribe(TOPIC))

    @precondition(lambda self: bool(self.c.pending))
    @rule(pick=st.integers(0, 10**6))
    def deliver(self, pick: int) -> None:
        choices = self.c.deliverable()
        self.c.deliver(choices[pick % len(choices)])

    @precondition(lambda self: bool(self.c.timers))
    @rule(pick=st.integers(0, 10**6))
    def fire_timer(self, pick: int) -> None:
        node, timer = self.c.timers.pop(pick % len(self.c.timers))
        self.c.run(node, TimerFired(timer))

    @precondition(lambda self: bool(self.c.pending))
    @rule(pick=st.integers(0, 10**6))
    def break_connection(self, pick: int) -> None:
        c = self.c
        src, dst, _ = c.pending[pick % len(c.pending)]
        c.pending = [m for m in c.pending if {m[0], m[1]} != {src, dst}]
        c.run(src, PeerDown(dst))
        c.run(dst, PeerDown(src))

    @precondition(lambda self: bool(self.c.pending))
    @rule(pick=st.integers(0, 10**6))
    def duplicate(self, pick: int) -> None:
        c = self.c
        candidates = [
            m for m in c.pending if not c.fifo or MESSAGE_INFO[type(m[2])].layer == "broadcast"
        ]
        if candidates:
            c.pending.append(candidates[pick % len(candidates)])

    @rule(pick=st.integers(0, 7))
    def crash(self, pick: int) -> None:
        c = self.c
        victims = [i for i in c.live if i != 0]
        if len(victims) <= 2:
            return  # keep a swarm worth checking: the contact and two others survive
        c.crash(victims[pick % len(victims)])

    @rule(pick=st.integers(0, 7))
    def publish(self, pick: int) -> None:
        c = self.c
        subscribers = [i for i in c.live if TOPIC in c.nodes[i].subscriptions()]
        if subscribers:
            c.next_pub += 1
            c.run(subscribers[pick % len(subscribers)], Publish(TOPIC, c.next_pub, b"m"))

    @rule(pick=st.integers(0, 7))
    def publish_as_relay(self, pick: int) -> None:
        """A node outside the topic publishes: it joins as a relay that never delivers."""
        c = self.c
        outside = [i for i in c.live if TOPIC not in c.nodes[i].subscriptions()]
        if outside:
            c.next_pub += 1
            c.run(outside[pick % len(outside)], Publish(TOPIC, c.next_pub, b"r"))

    @precondition(lambda self: self.since_quiesce >= 8)
    @rule()
    def quiesce(self) -> None:
        """Drain the pool (no faults, no timers); in the FIFO machine the active views are
        then symmetric among the live members. Enabled every 8 steps, so that faults and
        timers interleave with messages in flight most of the time."""
        self.since_quiesce = 0
        self.c.drain()
        self.c.check_views()
        if self.FIFO:
            self.c.check_symmetric()

    @invariant()
    def views_are_sound(self) -> None:
        self.since_quiesce += 1
        self.c.check_views()

    def teardown(self) -> None:
        self.quiesce()


class ReorderingMachine(GossipMachine):
    FIFO = False


# Measured on the shared 2-core machine: 8 s CPU, 20-40 s wall under load (FIFO ~5 s CPU; the
# reordering machine is slower per example because duplicated membership messages multiply
# the traffic). A reintroduced join-timeout bug (DISCONNECT filtered out) is found by the
# FIFO machine in some runs at this budget, not all: it needs a timer to fire in a window of
# a few deliveries.
#
# Derandomized (a fixed example sequence every run), so that `make test` decides the same way
# on every machine; a longer hunt (1,500 examples of 60 steps) found an accept crossing a
# DISCONNECT (test_gossip_rules.py::test_forward_join_accept_crossing_a_disconnect_keeps_
# links_symmetric), since fixed by echoing the DISCONNECT. Hunt for more with
# `derandomize=False` and a larger max_examples when changing the protocol.
MODEL_SETTINGS = settings(
    deadline=None, max_examples=200, stateful_step_count=50, derandomize=True, database=None
)
TestFifoCluster = GossipMachine.TestCase
TestFifoCluster.settings = MODEL_SETTINGS
TestReorderingCluster = ReorderingMachine.TestCase
TestReorderingCluster.settings = settings(MODEL_SETTINGS, max_examples=80)


def test_join_timeout_before_join_reply_keeps_links_symmetric() -> None:
    """Members 1 and 3 form the swarm; 2 joins through whichever the contact names, but its
    join timer fires before the JoinReply arrives. 2 asks the contact again; when it is named
    the other member, the first must not keep a link to 2 that 2 does not have (it did,
    until the timeout sent DISCONNECT). The directory's
    choice is random, so the sequence runs on ten cluster seeds (each is deterministic)."""
    for seed in range(10):
        c = Cluster(4, seed, fifo=True)
        c.run(1, Subscribe(TOPIC))
        c.drain()  # 1 starts the swarm
        c.run(3, Subscribe(TOPIC))
        c.drain()
        c.run(2, Subscribe(TOPIC))
        c.deliver(0)  # ContactRequest 2 -> 0
        c.deliver(0)  # ContactReply 0 -> 2: 2 sends Join to the member, sets the join timer
        c.deliver(0)  # Join: the member adds 2 and answers JoinReply
        membership = c.nodes[2].swarms[TOPIC].membership
        (timer,) = [
            t
            for n, t in c.timers
            if n == 2
            and isinstance(t, SwarmTimer)
            and t.timer == JoinTimeout(membership.join_generation)
        ]
        c.run(2, TimerFired(timer))  # join_timeout elapses before the JoinReply arrives
        c.drain()
        c.check_symmetric()
