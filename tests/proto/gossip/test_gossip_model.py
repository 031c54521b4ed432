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

Liveness, at the end of every example (``teardown``): the faults stop, at least two live
nodes subscribe, and the cluster settles: every pending message is delivered and the timers
fire in time order, up to ``SETTLE_HORIZON`` past the last fault (the random phase has no
clock: all of it happens at time 0, and a timer is due ``after`` seconds past the moment it
was set). Settling ends when nothing is in flight and the only timers left are periodic ones
(the shuffle, the cache eviction) past the horizon; it fails loudly after ``SETTLE_LIMIT``
steps. Then one live subscriber publishes a new message and, once the cluster settles again,
every live subscriber has delivered it exactly once (and no relay has).
"""

from __future__ import annotations

import dataclasses
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
from pubmesh.proto.gossip.hyparview import JoinTimeout, ShuffleTick
from pubmesh.proto.gossip.plumtree import EvictCache
from pubmesh.proto.gossip.rooted import BeaconTick

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
    # the paper's Plumtree: the machines below were tuned on its schedules (derandomized);
    # the rooted tree has machines of its own, further down
    tree="plumtree",
)
#: the same with the rooted tree (pubmesh.proto.gossip.rooted)
ROOTED_PARAMS = dataclasses.replace(PARAMS, tree="rooted")
DRAIN_LIMIT = 20_000
#: liveness: timers fire up to this long after the last fault; five shuffle periods leave
#: time for a join timeout (5 s) and its retry, and for shuffles to refill the views
SETTLE_HORIZON = 5 * PARAMS.shuffle_interval
#: liveness: steps (deliveries plus timer firings) a settling cluster may take
SETTLE_LIMIT = 20_000
#: timers that re-arm themselves for as long as the node runs (the cache eviction re-arms
#: while the cache holds anything, the rooted tree's beacon tick always): settling does not
#: wait for them past the horizon
PERIODIC = (ShuffleTick, EvictCache, BeaconTick)


def is_periodic(timer: Timer) -> bool:
    inner = timer.timer if isinstance(timer, SwarmTimer) else timer
    return isinstance(inner, PERIODIC)


class Cluster:
    """The nodes, the message pool (in send order) and the pending timers."""

    def __init__(self, size: int, seed: int, fifo: bool, params: GossipParams = PARAMS) -> None:
        self.fifo = fifo
        self.nodes = {
            i: GossipNode(NodeContext(i, random.Random(seed * 1000 + i), "peer", params))
            for i in range(size)
        }
        self.crashed: set[int] = set()
        self.pending: list[tuple[int, int, Message]] = []
        #: (due, sequence, node, timer): due = the clock when it was set + its delay
        self.timers: list[tuple[float, int, int, Timer]] = []
        self.timer_seq = 0
        #: the model's clock: 0 throughout the random phase, advanced only while settling
        self.now = 0.0
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
                for out in self.nodes[at].handle(ev, self.now):
                    if isinstance(out, Send):
                        if out.dst in self.crashed:
                            work.append((at, PeerDown(out.dst)))
                        else:
                            self.pending.append((at, out.dst, out.message))
                    elif isinstance(out, SetTimer):
                        self.timer_seq += 1
                        self.timers.append((self.now + out.after, self.timer_seq, at, out.timer))
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
        self.timers = [t for t in self.timers if t[2] != victim]
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

    def fire(self, index: int) -> None:
        _due, _seq, node, timer = self.timers.pop(index)
        self.run(node, TimerFired(timer))

    def settle(self, horizon: float) -> None:
        """Deliver every pending message (FIFO per link, oldest first) and fire the timers in
        time order, advancing the clock, until nothing is in flight and the only timers left
        are periodic ones due after ``horizon``."""
        for _ in range(SETTLE_LIMIT):
            if self.pending:
                self.deliver(self.deliverable()[0])
                continue
            if not self.timers:
                return
            index = min(range(len(self.timers)), key=lambda i: self.timers[i][:2])
            due = self.timers[index][0]
            if due > horizon and all(is_periodic(t[3]) for t in self.timers):
                return
            self.now = max(self.now, due)
            self.fire(index)
        raise AssertionError(
            f"the cluster does not settle in {SETTLE_LIMIT} steps (t = {self.now}): "
            f"{len(self.pending)} messages in flight, timers {sorted(self.timers)[:10]}"
        )

    def subscribers(self) -> list[int]:
        return [i for i in self.live if TOPIC in self.nodes[i].subscriptions()]

    def overlay(self) -> str:
        """The live members' active views, for failure messages."""
        views = {
            i: sorted(swarm.membership.active)
            for i in self.live
            if (swarm := self.nodes[i].swarms.get(TOPIC)) is not None
        }
        return f"active views {views}, subscribers {self.subscribers()}"

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
                eager, lazy = set(swarm.broadcast.eager), set(swarm.broadcast.lazy)
                assert eager | lazy <= set(active), f"{where} eager {eager} lazy {lazy}"
                assert not eager & lazy, f"{where} eager {eager} lazy {lazy}"
        self.check_parents()

    def check_parents(self) -> None:
        """The rooted tree's parent pointers never close a loop (its DSDV rules: within a
        round dist only decreases along them; a new round comes over a real path)."""
        parent: dict[int, int] = {}
        for i in self.live:
            swarm = self.nodes[i].swarms.get(TOPIC)
            if swarm is not None and swarm.broadcast.rt is not None:
                parent[i] = swarm.broadcast.rt.parent
        for start in parent:
            seen = [start]
            at = parent[start]
            while at in parent:
                assert at not in seen, f"parent pointers loop: {[*seen, at]}"
                seen.append(at)
                at = parent[at]

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
    #: whether teardown also checks liveness (the safety-only machines run without it)
    LIVENESS = True
    FIFO = True
    PARAMS = PARAMS

    def __init__(self) -> None:
        super().__init__()
        self.c: Cluster = Cluster(4, 0, self.FIFO, self.PARAMS)
        self.since_quiesce = 0

    @initialize(size=st.integers(4, 8), seed=st.integers(0, 2**16), initial=st.integers(0, 8))
    def setup(self, size: int, seed: int, initial: int) -> None:
        """A fresh cluster; the first ``initial`` nodes subscribe at once (nothing delivered
        yet), so most runs start with several concurrent joins."""
        self.c = Cluster(size, seed, self.FIFO, self.PARAMS)
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
        self.c.fire(pick % len(self.c.timers))

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
        if self.LIVENESS:
            self.check_liveness()

    def check_liveness(self) -> None:
        """The faults have stopped: once the cluster settles, a new publication from a live
        subscriber reaches every live subscriber (exactly once: ``Cluster.run`` fails on a
        second delivery or on a delivery at a relay)."""
        c = self.c
        # at least two subscribers, so that the publication has somewhere to go
        for i in c.live:
            if len(c.subscribers()) >= 2:
                break
            if TOPIC not in c.nodes[i].subscriptions():
                c.run(i, Subscribe(TOPIC))
        c.settle(c.now + SETTLE_HORIZON)
        c.check_views()
        if self.FIFO:
            c.check_symmetric()
        subscribers = c.subscribers()
        assert len(subscribers) >= 2, c.overlay()
        for i in subscribers:
            membership = c.nodes[i].swarms[TOPIC].membership
            assert membership.joined, f"subscriber {i} never completed its join; {c.overlay()}"
        c.next_pub += 1
        pub_id = c.next_pub
        publisher = subscribers[0]
        c.run(publisher, Publish(TOPIC, pub_id, b"live"))
        c.settle(c.now + SETTLE_HORIZON)
        missed = [i for i in subscribers if pub_id not in c.delivered[i]]
        assert not missed, (
            f"publication {pub_id} from {publisher} missed by {missed} after the cluster "
            f"settled; {c.overlay()}"
        )


class ReorderingMachine(GossipMachine):
    FIFO = False


# Liveness is checked by every machine below: with it switched off in the machines
# `make test` ran, the FIFO machine's derandomized examples included a swarm of 8 with 4
# subscribers that settled as {0, 1} beside a full {2, ..., 7} (seed 1994: a publication of 0
# missed 2 and 3), and the rooted reordering machine's two full K4 components; both merge
# now (the Bridge rule in pubmesh.proto.gossip.hyparview).
#
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


class RootedFifoMachine(GossipMachine):
    PARAMS = ROOTED_PARAMS


class RootedReorderingMachine(ReorderingMachine):
    """With the rooted tree's beacons in the pool the derandomized schedules differ; one of
    them left two full K4 components (active views of 3), which HyParView's own rules never
    merge (a member asks for a link only with room in its view): the Bridge rule does."""

    PARAMS = ROOTED_PARAMS


TestRootedFifoCluster = RootedFifoMachine.TestCase
TestRootedFifoCluster.settings = MODEL_SETTINGS
TestRootedReorderingCluster = RootedReorderingMachine.TestCase
TestRootedReorderingCluster.settings = settings(MODEL_SETTINGS, max_examples=80)


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
            for _due, _seq, n, t in c.timers
            if n == 2
            and isinstance(t, SwarmTimer)
            and t.timer == JoinTimeout(membership.join_generation)
        ]
        c.run(2, TimerFired(timer))  # join_timeout elapses before the JoinReply arrives
        c.drain()
        c.check_symmetric()


def test_newcomers_named_to_each_other_still_reach_the_swarm() -> None:
    """Liveness, the sequence the FIFO machine found (shrunk): 0, 1 and 2 subscribe and 3
    publishes as a relay, all at once; 3 and 1 crash before the contact has answered anyone;
    4 subscribes and 5 publishes as a relay. The directory names the dead 1, then the dead 3,
    to both 4 and 5, and then each of them to the other: 4 and 5 join each other, both count
    as joined, and the swarm is two islands, {0, 2} and {4, 5}, with empty passive views.
    Once the faults stop and the cluster settles, a publication of 0 must still reach the
    subscriber 4."""
    c = Cluster(6, 184, fifo=True)
    for i in (0, 1, 2):
        c.run(i, Subscribe(TOPIC))
    c.next_pub += 1
    c.run(3, Publish(TOPIC, c.next_pub, b"r"))
    c.crash(3)
    c.run(4, Subscribe(TOPIC))
    c.crash(1)
    c.next_pub += 1
    c.run(5, Publish(TOPIC, c.next_pub, b"r"))
    c.drain()
    c.settle(c.now + SETTLE_HORIZON)
    c.check_symmetric()
    assert c.subscribers() == [0, 2, 4]
    c.next_pub += 1
    c.run(0, Publish(TOPIC, c.next_pub, b"live"))
    c.settle(c.now + SETTLE_HORIZON)
    missed = [i for i in c.subscribers() if c.next_pub not in c.delivered[i]]
    assert not missed, f"subscribers {missed} missed publication {c.next_pub}; {c.overlay()}"


#: The FIFO machine's example (shrunk) in which the two members left, the contact 0 and
#: 3, hold only each other: every DISCONNECT emptied the receiver's active view, which asked the
#: contact at once, was named the other and re-joined it before the other's echo arrived, so
#: the echo found a link just re-made and was echoed back: DISCONNECT, echo and Join crossed
#: forever, with no timer in between (the drain gave up after 20,000 deliveries).
ECHO_STORM_SETUP = {"size": 5, "seed": 0, "initial": 5}
ECHO_STORM_STEPS: list[tuple[str, int | None]] = [
    ("break_connection", 0),
    ("break_connection", 0),
    ("deliver", 0),
    ("break_connection", 0),
    ("fire_timer", 1),
    ("break_connection", 0),
    ("deliver", 0),
    ("deliver", 0),
    ("duplicate", 0),
    ("break_connection", 0),
    ("quiesce", None),
    ("crash", 0),
    ("deliver", 0),
    ("publish", 0),
    ("fire_timer", 7),
    ("crash", 0),
    ("fire_timer", 0),
]


def replay(state: GossipMachine, steps: list[tuple[str, int | None]]) -> None:
    """Run a machine's rules step by step, checking the invariant after each."""
    for name, pick in steps:
        rule = getattr(state, name)
        if pick is None:
            rule()
        else:
            rule(pick=pick)
        state.views_are_sound()


def test_two_members_holding_only_each_other_settle_after_a_disconnect() -> None:
    """The sequence above drains (the node a DISCONNECT leaves alone waits for its shuffle
    tick before it asks the contact), its views end symmetric, and the two members are
    linked again once the timers run."""
    state = GossipMachine()
    state.setup(**ECHO_STORM_SETUP)
    replay(state, ECHO_STORM_STEPS)
    state.teardown()  # drains, checks symmetric views and liveness
    c = state.c
    c.settle(c.now + SETTLE_HORIZON)
    c.check_symmetric()
    members = [i for i in c.live if TOPIC in c.nodes[i].swarms]
    for i in members:
        active = c.nodes[i].swarms[TOPIC].membership.active
        assert active, f"member {i} has no active link after settling; {c.overlay()}"


#: The FIFO liveness machine's first failing example (derandomized, unshrunk): after relays,
#: broken connections (false suspicions) and timers, the five-node swarm settles into two
#: components, {0, 2, 4} and {1, 3}, each with a non-empty active view, so nobody asks the
#: contact again and HyParView's shuffles, which run inside a component, never merged them
#: (until the Merge rule: a periodic announce with room in the active view gets a sample).
FIFO_LIVENESS_SETUP = {"seed": 370, "initial": 7, "size": 5}
FIFO_LIVENESS_STEPS: list[tuple[str, int | None]] = [
    ("publish", 1),
    ("publish_as_relay", 2),
    ("fire_timer", 34741),
    ("break_connection", 5378),
    ("publish_as_relay", 2),
    ("publish_as_relay", 4),
    ("fire_timer", 177),
    ("break_connection", 1000000),
    ("publish_as_relay", 7),
    ("fire_timer", 11334),
    ("break_connection", 19131),
    ("quiesce", None),
    ("fire_timer", 407),
    ("publish_as_relay", 3),
    ("publish", 3),
    ("fire_timer", 167632),
    ("fire_timer", 429),
    ("fire_timer", 1989),
    ("fire_timer", 185926),
    ("publish", 2),
    ("publish", 3),
    ("fire_timer", 231),
    ("publish_as_relay", 7),
    ("publish_as_relay", 2),
    ("break_connection", 18),
    ("quiesce", None),
    ("fire_timer", 47750),
    ("fire_timer", 47349),
    ("fire_timer", 7965),
    ("publish", 7),
    ("publish_as_relay", 7),
    ("publish", 3),
    ("fire_timer", 927),
    ("quiesce", None),
    ("fire_timer", 8257),
    ("publish_as_relay", 3),
    ("publish", 0),
    ("fire_timer", 310),
    ("break_connection", 362879),
    ("break_connection", 623),
    ("publish_as_relay", 4),
    ("quiesce", None),
    ("fire_timer", 679123),
    ("publish", 0),
    ("break_connection", 340480),
    ("publish_as_relay", 7),
    ("fire_timer", 1127),
    ("publish_as_relay", 1),
    ("break_connection", 605),
]


def test_two_components_left_by_false_suspicions_merge_once_the_faults_stop() -> None:
    """Liveness on FIFO links, replayed step by step: once the faults stop, the two components
    merge (a member with room in its active view announces itself, the contact answers with a
    random member, and the member asks it for a link), and a publication reaches every
    subscriber. (The Hypothesis machine that found it is ``GossipMachine``, ``TestFifoCluster``;
    its derandomized examples differ between a whole-suite run and a run of this file alone,
    so the sequence is kept here.)"""
    state = GossipMachine()
    state.setup(**FIFO_LIVENESS_SETUP)
    replay(state, FIFO_LIVENESS_STEPS)
    state.teardown()
