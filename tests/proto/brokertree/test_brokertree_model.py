"""Model-based test of the brokertree stack: Hypothesis drives a small broker tree
(docs/protocols/brokertree.md; the stack's module essay in src/pubmesh/proto/brokertree/node.py).

The cluster is a :class:`pubmesh.harness.PoolCluster` (non-FIFO: any message in flight may
be delivered next, the node's sessions resequence, spec §2 "Links") of B brokers (ids
0 … B−1, B in 4 … 12, the tree drawn by the spec's generator with ``topology_seed`` = the
cluster seed) and 2–6 clients (``cluster.peers``), with δ ∈ {1, 2} and ``ack`` ∈ {"conf",
"dack"}, all drawn by ``setup``. The rules interleave, in any order Hypothesis picks:

* a client subscribes to t0 or t1 with a content filter over ``price`` (lt, ge or none). A
  Subscribe with the predicate the client already holds is ignored; another one replaces it
  (an Unsub of the old one, then a new Sub: node.py ``_subscribe``), and so it is in the
  model;
* a client unsubscribes from one of its topics;
* a client publishes on t0 or t1 with a random price, or with a price one of the current
  subscriptions matches, under a fresh pub_id (increasing over the whole run);
* deliver up to eight messages in flight, each chosen by index (any message, not the oldest
  of its link); or drain the pool (no timers); or run 1–3 fault-free seconds
  (``PoolCluster.quiesce``);
* fire the earliest timer (the clock jumps to it);
* crash a broker, while fewer than δ brokers are down (spec §11(a): "≤ δ crashes");
* recover a crashed broker (``add_node``: fresh state, a new incarnation, spec §7), at a
  later clock reading than its last start (``recoverable``);
* a false suspicion between two live adjacent brokers (``break_link``: both hear PeerDown,
  spec §2 "Mistakes"). Clients are never crashed.

Safety, after every step (spec §6.5, §11 "Wrong"): ``on_output`` records every ``Deliver``
as it is emitted and checks at once that

* no node delivers a pub_id twice;
* per (subscriber, publisher) the delivered pub_ids increase (pub_ids are issued increasing,
  so a smaller one after a larger one from the same publisher is an order violation);
* the node holds a subscription to the publication's topic at that moment and its filter
  matches the attributes (:func:`pubmesh.proto.content.matches` on the filter dict, the
  literal matcher of the analysis). A node unsubscribes at once on the command, so the
  model's subscription at the moment of the output is the node's.

Confirmation (spec §5 "Eligibility"): the client emits ``brokertree.sub_confirmed {topic,
partial}`` when a Sub of its own is confirmed. The record does not name the subscription, and
after a resubscription the old Sub's confirmation may still come; so the model takes a
record as confirming the *current* subscription only if the node's own entry for the topic
(``node.s.own[topic]``, read in the hook) is that subscription's origin and is confirmed. A
partial confirmation (``partial = True``) counts as not confirmed.

Liveness (``teardown``): every crashed broker recovers and the cluster runs fault-free for
``SETTLE`` seconds; then

* every publication issued while no broker was down, to a client whose subscription to its
  topic was fully confirmed at that moment and matched it, and which neither unsubscribed
  nor resubscribed that topic since, has been delivered there (spec §11(a): reliability 1
  over pairs published after confirmation, ≤ δ crashes);
* every current subscription has been confirmed (fully or partially): a Sub does not stay
  queued for ever once the faults stop;
* fresh publications from every client on both topics (fixed prices and a price each current
  subscription matches) reach every currently subscribed, fully confirmed client whose filter
  matches, exactly once.

Every failure message names the seed and the parameters; Hypothesis prints the steps
(``state = BrokerTreeMachine()``, ``state.setup(...)``, ``state.crash(pick=...)``, …), which
replay step by step (each followed by ``state.no_bad_delivery()``, then
``state.teardown()``). Replay:
``.venv/bin/python -m pytest tests/proto/brokertree/test_brokertree_model.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pubmesh.harness import PoolCluster
from pubmesh.proto.brokertree.node import BrokerTreeNode
from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.brokertree.topology import Tree
from pubmesh.proto.content import matches, validate, with_topic
from pubmesh.proto.core import (
    Deliver,
    NodeId,
    Output,
    Publish,
    Subscribe,
    TraceRecord,
    Unsubscribe,
)
from pubmesh.stacks.base import get_stack

SPEC = get_stack("brokertree")
TOPICS = ("t0", "t1")
#: liveness: fault-free seconds after every broker recovered (heartbeats 0.5 s, suspicion
#: 1.5 s, probes 2 s, dack and purge 1 s: spec §10)
SETTLE = 60.0
#: liveness: the prices of the closing publications (besides one per current subscription)
FINAL_PRICES = (5, 50, 95)
REPLAY = ".venv/bin/python -m pytest tests/proto/brokertree/test_brokertree_model.py"

prices = st.integers(0, 100)
filters = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"price": st.fixed_dictionaries({"lt": st.integers(1, 100)})}),
    st.fixed_dictionaries({"price": st.fixed_dictionaries({"ge": prices})}),
)


def witness(flt: dict[str, Any]) -> int:
    """A price ``flt`` matches (every generated filter is satisfiable)."""
    bounds = flt.get("price", {})
    price = bounds["ge"] if "ge" in bounds else bounds["lt"] - 1 if "lt" in bounds else 50
    assert matches(flt, {"price": price}), (flt, price)
    return int(price)


@dataclass
class ModelSub:
    """One subscription a client holds, as the model sees it."""

    gen: int
    filter: dict[str, Any]
    #: the node's origin of its Sub (read after the command), to recognise its confirmation
    origin: Any
    #: "no" until a sub_confirmed record for it; then "full" or "partial"
    confirmed: str = "no"


class BrokerTreeMachine(RuleBasedStateMachine):
    """The broker tree and the model of its subscriptions and publications (module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster: PoolCluster | None = None
        self.seed = 0
        self.brokers = 0
        self.delta = 0
        self.clients = 0
        self.ack = ""
        self.adjacent: list[tuple[NodeId, NodeId]] = []
        #: the model: client → topic → subscription
        self.subs: dict[NodeId, dict[str, ModelSub]] = {}
        self.next_gen = 0
        #: pub_id → (topic, attributes, publisher)
        self.pubs: dict[int, tuple[str, dict[str, Any], NodeId]] = {}
        self.next_pub = 0
        #: per node: pub_ids delivered, in order; last pub_id per publisher
        self.got: dict[NodeId, list[int]] = {}
        self.last: dict[tuple[NodeId, NodeId], int] = {}
        #: (subscriber, topic, gen, pub_id): deliveries owed (module doc, liveness)
        self.owed: list[tuple[NodeId, str, int, int]] = []
        #: safety violations seen by the hook, reported by the invariant
        self.errors: list[str] = []
        #: confirmations of a client's current Sub seen before the model knew the Sub (a
        #: Subscribe may be confirmed, partially, while the command runs): (node, topic) →
        #: (origin, partial)
        self.early: dict[tuple[NodeId, str], tuple[Any, bool]] = {}
        #: the clock reading at each node's last Start
        self.started: dict[NodeId, float] = {}
        self.crashes = 0
        self.suspicions = 0
        self.late = 0

    # ------------------------------------------------------------------ helpers
    @property
    def c(self) -> PoolCluster:
        assert self.cluster is not None
        return self.cluster

    def where(self) -> str:
        """What a failure message needs besides Hypothesis's printed steps."""
        c = self.c
        subs = {
            n: {t: (s.filter, s.confirmed) for t, s in sorted(ts.items())}
            for n, ts in sorted(self.subs.items())
            if ts
        }
        return (
            f"seed {self.seed} (= topology_seed), brokers {self.brokers}, delta {self.delta}, "
            f"ack {self.ack}, clients {c.peers}, t = {c.now:.2f} s, crashed "
            f"{sorted(c.crashed)}, {self.crashes} crashes and {self.suspicions} false "
            f"suspicions so far, {self.late} 'late' drops, model subscriptions {subs}; "
            f"replay: {REPLAY}"
        )

    def client(self, pick: int) -> NodeId:
        peers = self.c.peers
        return peers[pick % len(peers)]

    def brokers_down(self) -> list[NodeId]:
        return sorted(b for b in self.c.crashed if b < self.brokers)

    def on_output(self, node: NodeId, out: Output) -> None:
        """Every output of every node, as it is emitted (PoolCluster's hook)."""
        if isinstance(out, Deliver):
            self.on_deliver(node, out)
        elif isinstance(out, TraceRecord):
            if out.kind == "brokertree.sub_confirmed":
                self.on_confirmed(node, out.detail["topic"], bool(out.detail["partial"]))
            elif out.kind == "brokertree.late":
                self.late += 1

    def on_deliver(self, node: NodeId, out: Deliver) -> None:
        pub_id = out.pub_id
        if pub_id not in self.pubs:
            self.errors.append(f"node {node} delivered unknown pub_id {pub_id}")
            return
        topic, attrs, publisher = self.pubs[pub_id]
        log = self.got.setdefault(node, [])
        if pub_id in log:
            self.errors.append(
                f"node {node} delivered publication {pub_id} (from {publisher}) twice; "
                f"its deliveries so far {log}"
            )
        last = self.last.get((node, publisher))
        if last is not None and pub_id < last:
            self.errors.append(
                f"node {node} delivered publication {pub_id} from {publisher} after "
                f"{last} from the same publisher: out of order"
            )
        log.append(pub_id)
        self.last[(node, publisher)] = max(pub_id, last or 0)
        sub = self.subs.get(node, {}).get(topic)
        if out.topic != topic or sub is None or not matches(sub.filter, attrs):
            self.errors.append(
                f"node {node} delivered publication {pub_id} ({topic} {attrs}, from "
                f"{publisher}) as topic {out.topic!r}, its subscription to {topic} being "
                f"{None if sub is None else sub.filter}: outside a match"
            )

    def on_confirmed(self, node: NodeId, topic: str, partial: bool) -> None:
        sub = self.subs.get(node, {}).get(topic)
        found = self.c.nodes.get(node)
        if not isinstance(found, BrokerTreeNode):
            return
        own = found.s.own.get(topic)
        if own is None or not own.confirmed:
            return  # the confirmation of an earlier subscription to the topic
        if sub is None or own.origin != sub.origin:
            # the current Sub, confirmed while its Subscribe command runs: ``subscribe``
            # claims it
            self.early[(node, topic)] = (own.origin, partial)
            return
        if sub.confirmed != "full":
            sub.confirmed = "partial" if partial else "full"

    def new_pub(self, node: NodeId, topic: str, price: int) -> int:
        """Publish; the deliveries the model is owed from now on (module doc)."""
        self.next_pub += 1
        pub_id = self.next_pub
        attrs = {"price": price}
        self.pubs[pub_id] = (topic, attrs, node)
        if not self.brokers_down():
            for sub_node in sorted(self.subs):
                sub = self.subs[sub_node].get(topic)
                if sub is not None and sub.confirmed == "full" and matches(sub.filter, attrs):
                    self.owed.append((sub_node, topic, sub.gen, pub_id))
        self.c.command(node, Publish(topic, pub_id, b"m", dict(attrs)))
        return pub_id

    def still_held(self, node: NodeId, topic: str, gen: int) -> bool:
        sub = self.subs.get(node, {}).get(topic)
        return sub is not None and sub.gen == gen

    # ------------------------------------------------------------------ the machine
    @initialize(
        brokers=st.integers(4, 12),
        delta=st.sampled_from([1, 2]),
        clients=st.integers(2, 6),
        ack=st.sampled_from(["conf", "dack"]),
        seed=st.integers(0, 2**16),
    )
    def setup(self, brokers: int, delta: int, clients: int, ack: str, seed: int) -> None:
        self.seed, self.brokers, self.delta, self.clients, self.ack = (
            seed,
            brokers,
            delta,
            clients,
            ack,
        )
        params = BrokerTreeParams(brokers=brokers, delta=delta, topology_seed=seed, ack=ack)
        tree = Tree(params)
        self.adjacent = sorted(
            (a, b) for a in range(brokers) for b in tree.adj[a] if a < b < brokers
        )
        self.cluster = PoolCluster(
            SPEC, brokers + clients, seed, params=params, fifo=False, on_output=self.on_output
        )
        self.started = dict.fromkeys(range(brokers + clients), 0.0)

    @rule(pick=st.integers(0, 7), topic=st.sampled_from(TOPICS), flt=filters)
    def subscribe(self, pick: int, topic: str, flt: dict[str, Any]) -> None:
        node = self.client(pick)
        mine = self.subs.setdefault(node, {})
        old = mine.get(topic)
        same = old is not None and with_topic(validate(old.filter), topic) == with_topic(
            validate(flt), topic
        )
        self.early.pop((node, topic), None)
        self.c.command(node, Subscribe(topic, dict(flt)))
        if same:
            return  # the node ignores a Subscribe with the predicate it holds
        found = self.c.nodes[node]
        assert isinstance(found, BrokerTreeNode)
        own = found.s.own.get(topic)
        assert own is not None, f"node {node} did not take Subscribe({topic}); {self.where()}"
        self.next_gen += 1
        sub = mine[topic] = ModelSub(self.next_gen, dict(flt), own.origin)
        early = self.early.pop((node, topic), None)
        if early is not None and early[0] == own.origin:
            sub.confirmed = "partial" if early[1] else "full"

    @precondition(lambda self: any(self.subs.values()))
    @rule(pick=st.integers(0, 15))
    def unsubscribe(self, pick: int) -> None:
        held = [(n, t) for n in sorted(self.subs) for t in sorted(self.subs[n])]
        node, topic = held[pick % len(held)]
        del self.subs[node][topic]
        self.c.command(node, Unsubscribe(topic))

    @rule(pick=st.integers(0, 7), topic=st.sampled_from(TOPICS), price=prices)
    def publish(self, pick: int, topic: str, price: int) -> None:
        self.new_pub(self.client(pick), topic, price)

    @precondition(lambda self: any(self.subs.values()))
    @rule(pick=st.integers(0, 7), which=st.integers(0, 15))
    def publish_to_a_subscriber(self, pick: int, which: int) -> None:
        """Publish what one of the current subscriptions matches."""
        held = [(n, t) for n in sorted(self.subs) for t in sorted(self.subs[n])]
        node, topic = held[which % len(held)]
        self.new_pub(self.client(pick), topic, witness(self.subs[node][topic].filter))

    @precondition(lambda self: bool(self.c.deliverable()))
    @rule(picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=8))
    def deliver(self, picks: list[int]) -> None:
        """Deliver up to eight messages in flight, each chosen by index (any order)."""
        for pick in picks:
            ready = self.c.deliverable()
            if ready:
                self.c.deliver(ready[pick % len(ready)])

    @precondition(lambda self: bool(self.c.pool))
    @rule()
    def drain(self) -> None:
        """Deliver everything in flight, oldest first (no timers)."""
        self.c.drain()

    @rule(horizon=st.sampled_from([1.0, 3.0]))
    def run_for(self, horizon: float) -> None:
        """A short fault-free stretch: messages and timers in time order."""
        self.c.quiesce(horizon)

    @precondition(lambda self: bool(self.c.timers))
    @rule()
    def fire_timer(self) -> None:
        self.c.fire_next_timer()

    @precondition(lambda self: len(self.brokers_down()) < self.delta)
    @rule(pick=st.integers(0, 15))
    def crash(self, pick: int) -> None:
        live = [b for b in range(self.brokers) if b not in self.c.crashed]
        self.crashes += 1
        self.c.crash(live[pick % len(live)])

    def recoverable(self) -> list[NodeId]:
        """Crashed brokers whose restart comes later than their last start: a node's
        sequence numbers are (epoch = the clock at Start, k) and a restarted node's must
        exceed its old ones (spec §2 "Sequence numbers"), which any real clock gives. The
        harness's clock only moves with timers, so a broker started, crashed and restarted at
        one clock reading would reuse its old numbers (its neighbours then drop its copies
        as duplicates): not a schedule the simulator or TCP can produce."""
        return [b for b in self.brokers_down() if self.c.now > self.started[b]]

    @precondition(lambda self: bool(self.recoverable()))
    @rule(pick=st.integers(0, 15))
    def recover(self, pick: int) -> None:
        down = self.recoverable()
        self.restart(down[pick % len(down)])

    def restart(self, broker: NodeId) -> None:
        self.started[broker] = self.c.now
        self.c.add_node(broker)

    @rule(pick=st.integers(0, 31))
    def false_suspicion(self, pick: int) -> None:
        """Two live adjacent brokers suspect each other (both hear PeerDown)."""
        pairs = [(a, b) for a, b in self.adjacent if not {a, b} & self.c.crashed]
        if not pairs:
            return
        a, b = pairs[pick % len(pairs)]
        self.suspicions += 1
        self.c.break_link(a, b)

    @invariant()
    def no_bad_delivery(self) -> None:
        if self.errors:
            raise AssertionError("; ".join(self.errors) + f"; {self.where()}")

    # ------------------------------------------------------------------ liveness
    def teardown(self) -> None:
        if self.cluster is None:
            return
        c = self.c
        if len(self.recoverable()) < len(self.brokers_down()):
            c.quiesce(0.5)  # a later clock reading for the restarts (``recoverable``)
        for broker in self.brokers_down():
            self.restart(broker)
        c.quiesce(SETTLE)
        self.no_bad_delivery()
        missed = [
            (node, topic, pub_id)
            for node, topic, gen, pub_id in self.owed
            if self.still_held(node, topic, gen) and pub_id not in self.got.get(node, [])
        ]
        assert not missed, (
            "publications issued while no broker was down, to a fully confirmed matching "
            f"subscription, never delivered (node, topic, pub_id): {missed}; publications "
            + ", ".join(f"{p}: {self.pubs[p]}" for _, _, p in missed)
            + f"; {self.where()}"
        )
        pending = sorted(
            (node, topic)
            for node, mine in self.subs.items()
            for topic, sub in mine.items()
            if sub.confirmed == "no"
        )
        assert not pending, (
            f"subscriptions (node, topic) never confirmed {SETTLE} s after every broker "
            f"recovered: {pending}; {self.where()}"
        )
        final: list[tuple[NodeId, str, int]] = []
        for publisher in c.peers:
            for topic in TOPICS:
                prices_ = set(FINAL_PRICES)
                prices_.update(
                    witness(mine[topic].filter) for mine in self.subs.values() if topic in mine
                )
                for price in sorted(prices_):
                    final.append((publisher, topic, price))
        issued = [(self.new_pub(p, t, price), t, price) for p, t, price in final]
        c.quiesce(10.0)
        self.no_bad_delivery()
        for pub_id, topic, price in issued:
            want = sorted(
                n
                for n, mine in self.subs.items()
                if (sub := mine.get(topic)) is not None
                and sub.confirmed == "full"
                and matches(sub.filter, {"price": price})
            )
            got = sorted(n for n in c.peers if pub_id in self.got.get(n, []))
            missing = sorted(set(want) - set(got))
            assert not missing, (
                f"publication {pub_id} ({topic}, price {price}, from {self.pubs[pub_id][2]}) "
                f"after the faults stopped reached {got}, missed fully confirmed matching "
                f"subscribers {missing}; {self.where()}"
            )


# Derandomized (a fixed example sequence every run), so that `make test` decides the same way
# on every machine. 200 examples rather than 100: the fixed sequence of 100 misses the replay
# below (a restarted broker's window before its table is whole) on the stack that has it, the
# sequence of 200 finds it. Measured on the shared 2-core machine: the file about 14 s CPU,
# 17 s wall while it passes (a failure adds Hypothesis's shrinking, up to five minutes).
# Random hunts (`derandomize=False`, 3,000 examples of 40 steps) found no other failure on
# the stack with that fix; without it, 1 in about 80 examples misses an owed publication.
MODEL_SETTINGS = settings(
    deadline=None, max_examples=200, stateful_step_count=40, derandomize=True, database=None
)
TestBrokerTreeModel = BrokerTreeMachine.TestCase
TestBrokerTreeModel.settings = MODEL_SETTINGS


# ---------------------------------------------------------------- found by the state machine
# found by the state machine (shrunk further by hand): a broker restarted with fresh state
# routed a publication before it had the subscription tables of all its neighbours. Six
# brokers (tree 0-1, 0-2, 1-3, 1-4, 1-5), δ = 1, ack "conf"; client 6 hangs off broker 2,
# client 7 off broker 0. Broker 2 crashes at 0 s and restarts at 0.5 s (that only moves its
# probe timer); broker 0 crashes at 0.5 s and restarts at 5.0 s; client 6 then
# subscribes, and since broker 2 still holds 0 as failed (its next probe is at 6.5 s) the Sub
# goes 2 → 1 around 0 and is fully confirmed without 0. At 6.0 s broker 1 and client 7
# re-activate their sessions with 0; 1's summary leaves out the tuple (its subscriber lies
# beyond 0, spec §7.2), so 0 reports ``recovered`` with an empty table, and client 7's
# publication on t1 (price 19, matching 6's filter price < 20) reaches 0, matches nothing
# and is confirmed and dropped. Broker 2 sends 0 the tuple at 6.5 s, too late: 6 never gets
# the publication, though it was issued with every broker up, after the subscription's full
# confirmation, with one crash at a time under δ = 1 (spec §11(a), §11(c): "With δ:
# reliability 1 over everything").
def test_a_restarted_broker_routes_nothing_before_its_table_is_whole() -> None:
    state = BrokerTreeMachine()
    state.setup(brokers=6, delta=1, ack="conf", clients=2, seed=8503)
    state.crash(pick=2)
    state.fire_timer()
    state.recover(pick=0)
    state.crash(pick=0)
    state.run_for(horizon=3.0)
    state.run_for(horizon=1.0)
    state.recover(pick=7)
    state.subscribe(flt={"price": {"lt": 20}}, pick=4, topic="t1")
    state.fire_timer()
    state.run_for(horizon=1.0)
    state.publish_to_a_subscriber(pick=3, which=12)
    state.no_bad_delivery()
    state.teardown()
