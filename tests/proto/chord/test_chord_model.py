"""Model-based test of the chord stack: Hypothesis drives a small Chord ring
(docs/protocols/chord.md).

The cluster is a :class:`pubmesh.harness.PoolCluster` of chord nodes (default
:class:`~pubmesh.proto.chord.params.ChordParams`: merging routing, auto L) with node 0 as the
contact. It starts with 2–8 nodes, either *joining* (every node started, its JoinRequest to
0 in flight: spec §7) or *warm* (the legitimate overlay of spec §3 with every filter at its
fixpoint, as ``_warm`` in tests/proto/chord/test_chord_rules.py builds it). The rules
interleave, in any order Hypothesis picks:

* subscribe a live node to topic t0 or t1 with a small content filter over ``price``
  (numeric: lt, ge or both) and ``symbol`` ("A", "B", "C"), or none (match all); a second
  Subscribe to a topic the node holds is ignored (spec §6), and so it is in the model;
* unsubscribe a live node from one of its topics;
* publish from a live node, with random attributes (``symbol`` sometimes missing: a missing
  attribute fails every op, spec §4), or with attributes that one of the current
  subscriptions matches, under a fresh pub_id. A node still joining queues it until it has a
  successor (spec §5, §12.3);
* deliver up to eight messages in flight, each chosen by index: *any* message, not the
  oldest of its link (the simulator's per-message latencies reorder every link); or drain
  the pool (oldest first, no timers), so that publications finish mid-run;
* fire the earliest timer (the clock jumps to it), or the earliest timer of one live node
  ahead of everyone else's (a fast clock at that node); every sixth step at most, run 2, 10
  or 30 fault-free seconds (``PoolCluster.quiesce``), so that later faults also meet rings
  that have settled;
* join a new node (a fresh id, started with contact 0) while at most 16 nodes were created;
* crash a node other than the contact, while at least three are live: messages to it vanish
  and every node monitoring it hears ``PeerDown`` (the perfect failure detector of the
  harness; spec §8). Spec §8 guarantees repair "unless some node lost all L successors at
  once", so the machine only crashes a node if every joined node (and every joiner whose
  LocationReply is in flight) keeps a live entry in its successor list; crashes are
  otherwise unrestricted (several before any repair, during joins, of fingers, of
  publishers). Beyond that guarantee the protocol's own answer (§8.3, rejoin through the
  contact) is checked by the two replay tests at the end of the file.

The model keeps its own copy of every live node's subscriptions (topic → filter dict) and of
every publication (topic, attributes). After every step, each delivery that appeared since
the last check is checked against it (spec §11.3–11.4):

* no node delivers a pub_id twice (ranges nest and siblings' ranges are disjoint, so this
  holds under any churn, not only in quiet runs: spec §5 and §11.4);
* no delivery outside a match: the node holds a subscription to the publication's topic at
  that moment and its filter matches the attributes, by the literal matcher of the analysis
  (:func:`pubmesh.proto.content.matches` on the filter dict), independent of the normal form
  the node routes with. Subscriptions only change in rules that deliver nothing, so the
  subscription active at delivery is the one the model holds after the step.

Liveness, at the end of every example (``teardown``): the faults stop; if fewer than two live
nodes hold a subscription, match-all subscriptions to t0 are added so that the publications
have somewhere to go; the cluster settles for ``SETTLE_HORIZON`` seconds; then the quiet
predicate Q (spec §11, :func:`pubmesh.proto.chord.legitimacy.violations`) must hold over the
live nodes, and fresh publications from up to three live nodes (both topics with a fixed set
of attributes, and for each live subscription attributes it matches) must each reach exactly
the live subscribers whose filter matches: no false negatives, no false positives at
delivery, nothing twice. Every failure message names the cluster seed and the start mode;
Hypothesis prints the steps (``state.setup(...)``, ``state.crash(pick=...)``, …), which replay
step by step on a ``ChordMachine()`` (each step followed by ``deliveries_are_matches()``,
then ``teardown()``).
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pubmesh.harness import PoolCluster
from pubmesh.proto.chord.legitimacy import violations
from pubmesh.proto.chord.messages import LocationReply
from pubmesh.proto.chord.node import JOINING, ChordNode
from pubmesh.proto.chord.params import ChordParams
from pubmesh.proto.chord.warm import warm_start
from pubmesh.proto.content import matches
from pubmesh.proto.core import NodeId, Publish, Subscribe, Unsubscribe
from pubmesh.stacks.base import get_stack

SPEC = get_stack("chord")
PARAMS = ChordParams()
CONTACT = 0
TOPICS = ("t0", "t1")
SYMBOLS = ("A", "B", "C")
#: nodes ever created (crashed ones included): the ring stays small
MAX_NODES = 16
#: liveness: seconds of fault-free running before Q must hold. Spec §10: a lookup retries
#: every 2 s up to 5 times (10 s), RespChange every 1 s, stabilize and fix_fingers every 5 s
#: (one far finger per period), the filter refresh every 15 s; a joiner's notice repeats every
#: 2 s. 120 s leaves room for a repair that needs a few stabilize rounds and lookups in turn.
SETTLE_HORIZON = 120.0
#: liveness: the attributes of the closing publications (each from up to three publishers on
#: both topics): both sides of the price bounds, every symbol, and a missing symbol
FINAL_ATTRIBUTES: tuple[dict[str, Any], ...] = (
    {"price": 5, "symbol": "A"},
    {"price": 50, "symbol": "B"},
    {"price": 95, "symbol": "C"},
    {"price": 50},
)

prices = st.integers(0, 100)
price_constraints = st.one_of(
    st.fixed_dictionaries({"lt": prices}),
    st.fixed_dictionaries({"ge": prices}),
    st.tuples(prices, st.integers(1, 60)).map(lambda p: {"ge": p[0], "lt": p[0] + p[1]}),
)
filters = st.fixed_dictionaries(
    {}, optional={"price": price_constraints, "symbol": st.sampled_from(SYMBOLS)}
)
attributes = st.fixed_dictionaries({"price": prices}, optional={"symbol": st.sampled_from(SYMBOLS)})


def witness(flt: dict[str, Any]) -> dict[str, Any]:
    """Attributes that ``flt`` matches (every generated filter is satisfiable)."""
    bounds = flt.get("price", {})
    price = bounds["ge"] if "ge" in bounds else bounds["lt"] - 1 if "lt" in bounds else 50
    found = {"price": price, "symbol": flt.get("symbol", "A")}
    assert matches(flt, found), (flt, found)
    return found


class ChordMachine(RuleBasedStateMachine):
    """The chord cluster and the model of its subscriptions and publications (module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster: PoolCluster | None = None
        self.seed = 0
        self.mode = ""
        #: the model: live node → topic → filter dict
        self.subs: dict[NodeId, dict[str, dict[str, Any]]] = {}
        #: pub_id → (topic, attributes, publisher)
        self.pubs: dict[int, tuple[str, dict[str, Any], NodeId]] = {}
        #: per node: deliveries already checked, and the pub_ids among them
        self.checked: dict[NodeId, int] = {}
        self.got: dict[NodeId, set[int]] = {}
        self.next_node = 0
        self.next_pub = 0
        self.since_run = 0

    # ------------------------------------------------------------------ helpers
    @property
    def c(self) -> PoolCluster:
        assert self.cluster is not None
        return self.cluster

    def where(self) -> str:
        """What a failure message needs besides Hypothesis's printed steps."""
        c = self.c
        return (
            f"seed {self.seed}, start {self.mode}, t = {c.now:.2f} s, live {c.live}, "
            f"crashed {sorted(c.crashed)}, model subscriptions {self.subs}; replay: "
            ".venv/bin/python -m pytest -q -p no:cacheprovider"
            " tests/proto/chord/test_chord_model.py"
        )

    def pick_live(self, pick: int) -> NodeId:
        live = self.c.live
        return live[pick % len(live)]

    def check_deliveries(self) -> None:
        """Every delivery since the last check: not twice at a node, and inside a match of
        the node's current subscription (module doc)."""
        c = self.c
        for node, log in c.delivered.items():
            start = self.checked.get(node, 0)
            if start == len(log):
                continue
            self.checked[node] = len(log)  # each delivery is judged once, even if it fails
            assert node not in c.crashed, f"crashed node {node} delivered; {self.where()}"
            got = self.got.setdefault(node, set())
            for topic, pub_id, hops in log[start:]:
                assert pub_id in self.pubs, (
                    f"node {node} delivered unknown {pub_id}; {self.where()}"
                )
                pub_topic, attrs, publisher = self.pubs[pub_id]
                assert pub_id not in got, (
                    f"node {node} delivered publication {pub_id} twice (hops {hops}, from "
                    f"{publisher}); {self.where()}"
                )
                got.add(pub_id)
                flt = self.subs.get(node, {}).get(pub_topic)
                assert topic == pub_topic and flt is not None and matches(flt, attrs), (
                    f"node {node} delivered publication {pub_id} ({topic}, {attrs}, from "
                    f"{publisher}, hops {hops}) with subscription "
                    f"{self.subs.get(node, {})}: outside a match; {self.where()}"
                )

    def new_pub(self, node: NodeId, topic: str, attrs: dict[str, Any]) -> int:
        self.next_pub += 1
        self.pubs[self.next_pub] = (topic, dict(attrs), node)
        self.c.command(node, Publish(topic, self.next_pub, b"m", dict(attrs)))
        return self.next_pub

    def subscribe_node(self, node: NodeId, topic: str, flt: dict[str, Any]) -> None:
        self.c.command(node, Subscribe(topic, flt))
        mine = self.subs.setdefault(node, {})
        if topic not in mine:  # spec §6: a topic already subscribed is ignored
            mine[topic] = flt

    # ------------------------------------------------------------------ the machine
    @initialize(
        size=st.integers(2, 8),
        seed=st.integers(0, 2**16),
        warm=st.booleans(),
        initial=st.lists(st.tuples(st.integers(0, 7), st.sampled_from(TOPICS), filters)),
    )
    def setup(
        self, size: int, seed: int, warm: bool, initial: list[tuple[int, str, dict[str, Any]]]
    ) -> None:
        """``size`` nodes, their joins in flight or the warm overlay; the ``initial``
        subscriptions are made before the warm start (so its filters include them) or while
        the nodes are still joining (held until the join, spec §12.3)."""
        self.seed, self.mode = seed, "warm" if warm else "joining"
        self.cluster = PoolCluster(SPEC, size, seed, params=PARAMS, fifo=False)
        self.next_node = size
        for pick, topic, flt in initial:
            self.subscribe_node(pick % size, topic, flt)
        if warm:
            c = self.c
            c.pool.clear()  # as ``[init] overlay = "warm"``: messages dropped, timers kept
            warm_start({n: c.nodes[n] for n in c.live}, random.Random(seed), PARAMS)

    @rule(pick=st.integers(0, 15), topic=st.sampled_from(TOPICS), flt=filters)
    def subscribe(self, pick: int, topic: str, flt: dict[str, Any]) -> None:
        self.subscribe_node(self.pick_live(pick), topic, flt)

    @precondition(lambda self: any(self.subs.values()))
    @rule(pick=st.integers(0, 31))
    def unsubscribe(self, pick: int) -> None:
        held = [(n, t) for n in sorted(self.subs) for t in sorted(self.subs[n])]
        node, topic = held[pick % len(held)]
        self.c.command(node, Unsubscribe(topic))
        del self.subs[node][topic]

    @rule(pick=st.integers(0, 15), topic=st.sampled_from(TOPICS), attrs=attributes)
    def publish(self, pick: int, topic: str, attrs: dict[str, Any]) -> None:
        self.new_pub(self.pick_live(pick), topic, attrs)

    @precondition(lambda self: any(self.subs.values()))
    @rule(pick=st.integers(0, 15), which=st.integers(0, 31))
    def publish_to_a_subscriber(self, pick: int, which: int) -> None:
        """Publish what one of the current subscriptions matches (random attributes match
        rarely, so this gives the delivery checks something to check mid-run)."""
        held = [(n, t) for n in sorted(self.subs) for t in sorted(self.subs[n])]
        node, topic = held[which % len(held)]
        self.new_pub(self.pick_live(pick), topic, witness(self.subs[node][topic]))

    @precondition(lambda self: bool(self.c.pool))
    @rule(picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=8))
    def deliver(self, picks: list[int]) -> None:
        """Deliver up to eight messages in flight, each chosen by index (any order)."""
        for pick in picks:
            if self.c.pool:
                self.c.deliver(pick % len(self.c.pool))

    @precondition(lambda self: bool(self.c.pool))
    @rule()
    def drain(self) -> None:
        """Deliver everything in flight, oldest first (no timers): publications finish."""
        self.c.drain()

    @precondition(lambda self: self.since_run >= 6)
    @rule(horizon=st.sampled_from([2.0, 10.0, 30.0]))
    def run_for(self, horizon: float) -> None:
        """A fault-free stretch: everything in flight and every timer due within
        ``horizon`` seconds, in time order. Enabled every 6 steps, so that joins and crashes
        also meet rings that have (partly) settled."""
        self.since_run = 0
        self.c.quiesce(horizon)

    @precondition(lambda self: bool(self.c.timers))
    @rule()
    def fire_timer(self) -> None:
        self.c.fire_next_timer()

    @rule(pick=st.integers(0, 15))
    def fire_timer_of(self, pick: int) -> None:
        self.c.fire_timer_of(self.pick_live(pick))

    @precondition(lambda self: self.next_node < MAX_NODES)
    @rule()
    def join(self) -> None:
        self.c.add_node(self.next_node)
        self.next_node += 1

    def survivable(self, victim: NodeId) -> bool:
        """Spec §8's guarantee: Q returns unless some node lost all L successors at once. So
        a crash must leave every joined node, and every joiner whose LocationReply is in
        flight, a live entry in its successor list (what lies beyond is the rejoin of §8.3:
        the replay tests below)."""
        c = self.c
        lists = [c.nodes[n].succ for n in c.live if isinstance(c.nodes[n], ChordNode)]
        for item in c.pool:
            joiner = c.nodes[item.dst]
            if (
                isinstance(item.message, LocationReply)
                and isinstance(joiner, ChordNode)
                and item.dst not in c.crashed
                and joiner.state == JOINING
            ):
                lists.append(joiner.s.clockwise([item.src, *item.message.successors]))
        dead = c.crashed | {victim}
        return all(any(x not in dead for x in succ) for succ in lists if succ)

    @precondition(lambda self: len(self.c.live) > 2)
    @rule(pick=st.integers(0, 15))
    def crash(self, pick: int) -> None:
        victims = [n for n in self.c.live if n != CONTACT and self.survivable(n)]
        if not victims:
            return
        victim = victims[pick % len(victims)]
        self.check_deliveries()
        self.c.crash(victim)
        self.subs.pop(victim, None)

    @invariant()
    def deliveries_are_matches(self) -> None:
        self.since_run += 1
        if self.cluster is not None:
            self.check_deliveries()

    # ------------------------------------------------------------------ liveness
    def teardown(self) -> None:
        if self.cluster is None:
            return
        c = self.c
        self.check_deliveries()
        for node in c.live:
            if sum(1 for n in c.live if self.subs.get(n)) >= 2:
                break
            if not self.subs.get(node):
                self.subscribe_node(node, "t0", {})
        c.quiesce(SETTLE_HORIZON)
        self.check_deliveries()
        found = violations({n: c.nodes[n] for n in c.live})
        assert not found, (
            f"Q fails {SETTLE_HORIZON} s after the faults stopped: " + "; ".join(found)
        ) + f"; {self.where()}"
        live = c.live
        publishers = sorted({live[0], live[len(live) // 2], live[-1]})
        # the fixed attributes on both topics, and what each live subscription matches
        final = [(topic, attrs) for topic in TOPICS for attrs in FINAL_ATTRIBUTES]
        for node in live:
            final += [
                (topic, witness(flt)) for topic, flt in sorted(self.subs.get(node, {}).items())
            ]
        for publisher in publishers:
            for topic, attrs in final:
                self.check_exact(publisher, topic, attrs)

    def check_exact(self, publisher: NodeId, topic: str, attrs: dict[str, Any]) -> None:
        """On a quiet ring a fresh publication reaches exactly the live subscribers whose
        subscription matches, once each (spec §11.2–11.3)."""
        c = self.c
        pub_id = self.new_pub(publisher, topic, attrs)
        c.drain()
        self.check_deliveries()
        want = sorted(
            n
            for n in c.live
            if (flt := self.subs.get(n, {}).get(topic)) is not None and matches(flt, attrs)
        )
        got = sorted(n for n in c.live if pub_id in self.got.get(n, set()))
        assert got == want, (
            f"publication {pub_id} ({topic}, {attrs}) from {publisher} after the cluster "
            f"settled reached {got}, the matching subscribers are {want} (missed "
            f"{sorted(set(want) - set(got))}); {self.where()}"
        )


# Measured on the shared 2-core machine: the machine 24 s CPU, 25 s wall alone (about 35-50 s
# wall when another job holds a core); the whole file 26 s. Derandomized (a fixed example
# sequence every run), so that `make test` decides the same way on every machine. Hunts
# with `derandomize=False` found nothing inside spec §8's guarantee: 1,500 examples of 100
# steps and 1,000 of 80 (default params), 400 of 60 each with routing "covering" and with
# max_conj = 2 (imperfect merges); without the crash restriction, 500 examples of 60 steps
# kept the safety checks (no duplicate, no delivery outside a match) through every rejoin,
# and found the two sequences replayed below. Hunt again that way when changing the protocol.
MODEL_SETTINGS = settings(
    deadline=None, max_examples=150, stateful_step_count=50, derandomize=True, database=None
)
TestChordModel = ChordMachine.TestCase
TestChordModel.settings = MODEL_SETTINGS


# ---------------------------------------------------------------- beyond the guarantee
# Spec §8 guarantees Q after a quiet repair time "unless some node lost all L successors at
# once", and prescribes what happens then: "Successor list exhausted: rejoin via the contacts,
# keeping subscriptions" (§8.3; §11.9c: "kill 85%: rejoins via the contact"). The machine
# above stays inside the guarantee (``ChordMachine.survivable``); without that restriction it
# found the two sequences below (shrunk by hand to a warm six-node ring, seed 0, whose keys
# run 1, 5, 0, 4, 2, 3 clockwise, L = 4). Both ended in a state that no timer repaired, until
# node.py's rejoin sent Leaving to its in-neighbours and a lone node learned from a
# SuccListRequest (Chord's notify).
def _warm_ring_losing_a_list(owner: NodeId) -> PoolCluster:
    """The warm six-node ring with ``owner``'s whole successor list crashed at once, then
    120 fault-free seconds."""
    cluster = PoolCluster(SPEC, 6, 0, params=PARAMS, fifo=False)
    cluster.pool.clear()
    warm_start({n: cluster.nodes[n] for n in cluster.live}, random.Random(0), PARAMS)
    doomed = list(_chord(cluster, owner).succ)
    assert CONTACT not in doomed and len(doomed) == 4, doomed
    for node in doomed:
        cluster.crash(node)
    cluster.quiesce(SETTLE_HORIZON)
    return cluster


def _chord(cluster: PoolCluster, node: NodeId) -> ChordNode:
    found = cluster.nodes[node]
    assert isinstance(found, ChordNode)
    return found


def test_a_node_that_lost_its_whole_list_rejoins_through_the_contact() -> None:
    """Node 4 (the contact's successor) loses its list [2, 3, 1, 5]; 0 and 4 are left. 4
    rejoins (§8.3): JoinRequest to 0, which publishes the location notification for
    key(4)+1 down its tree, i.e. to its successor 4, which still has it as an edge (4 is
    alive: no PeerDown, and the rejoin tells only 4's own out-edges). 4 is joining, so it
    neither answers nor forwards the notification, nor answers 0's SuccListRequest, nor
    acknowledges 0's RespChange (re-sent every second for ever): 4 stayed "joining" and
    every publication for it was lost. The fix: the rejoining node sends Leaving with an
    empty list to its in-neighbours, so 0 drops it (a ring of one) and answers the next
    JoinRequest itself."""
    cluster = _warm_ring_losing_a_list(4)
    found = violations({n: cluster.nodes[n] for n in cluster.live})
    assert not found, (
        "Q fails after a rejoin: "
        + "; ".join(found)
        + (f" (node 4: state {_chord(cluster, 4).state}, {_chord(cluster, 0).counters})")
    )


def test_the_contact_that_lost_its_whole_list_takes_its_predecessor_back() -> None:
    """The contact 0 loses its list [4, 2, 3, 1]; 0 and 5 are left. The contact does not
    rejoin (it is the contact): it becomes a ring of one with an empty list, while 5 keeps 0
    as its successor and stabilizes with it every 5 s. Nothing puts 5 back into 0's list (a
    SuccListRequest teaches the answering node nothing; a lone node never adopts its
    in-neighbour), so Q1 failed for ever. The fix: a node alone learns the sender of a
    SuccListRequest (Chord's notify)."""
    cluster = _warm_ring_losing_a_list(0)
    found = violations({n: cluster.nodes[n] for n in cluster.live})
    assert not found, "Q fails after the contact lost its list: " + "; ".join(found)
