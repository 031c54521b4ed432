"""Model-based tests of the ``clique`` and ``d2g`` stacks (docs/protocols/relay.md §9: "Hypothesis
state machines over small groups (≤ 8) with random delivery order, junk and crashes, checking the
oracle's invariants after every step and convergence after quiesce").

The cluster is a :class:`pubmesh.harness.PoolCluster` with non-FIFO delivery: node 0 is
the contact, every other node subscribes to topic ``t0``. It starts either *joining* (every
Join in flight) or in a corrupted state of one of the stack's §6 kinds with junk messages in
flight. The rules interleave, in any order Hypothesis picks:

* deliver up to eight messages in flight, each chosen by index (any message, not the oldest
  of its link), or drain the pool;
* fire the earliest timer (the clock jumps to it) once the pool is empty: the relay layer
  assumes a message is delivered within ``grace`` of its sending (spec §2.3: a holder counted
  within grace is not probed), so timers run between rounds of random deliveries, as in the
  simulator where every message takes ≤ 20 ms and T = 0.25 s;
* unsubscribe a member (Leave) or subscribe it again;
* crash a node other than the contact (its relays die with it: PeerDown);
* run 2 fault-free seconds.

After every step the oracle (tests/support/relayoracle.py) must find no holder count below
the truth (E_L ∪ E_M), and, until the first crash, every topic's relay graph weakly connected
(a crash may cut it: Scheideler's lecture Theorem 9.3 converges from weakly connected states, and
crashes are not in the slides). At the end (``teardown``): if the relay graph is weakly connected,
the group is legitimate within the spec's bound (clique: 6·n ln n + 50 rounds; d2g: 40√n + 300), and
a publication from a member then reaches every other member exactly once. Every failure names the
cluster seed and the start; Hypothesis prints the steps.
"""

from __future__ import annotations

import math
import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pubmesh.harness import InFlight, PoolCluster
from pubmesh.proto.core import NodeId, Publish, Subscribe, Unsubscribe
from pubmesh.stacks.base import get_stack
from support.relayoracle import check

CONTACT = 0
TOPIC = "t0"


class RelayMachine(RuleBasedStateMachine):
    """A small clique or d2g group under random delivery, leaves and crashes (module doc)."""

    STACK = "clique"

    def __init__(self) -> None:
        super().__init__()
        self.cluster: PoolCluster | None = None
        self.seed = 0
        self.start = ""
        self.crashed = False
        self.wanted: set[NodeId] = set()
        self.next_pub = 1

    @property
    def c(self) -> PoolCluster:
        assert self.cluster is not None
        return self.cluster

    def where(self) -> str:
        return f"{self.STACK}, seed {self.seed}, start {self.start}, t = {self.c.now:.2f} s"

    @initialize(
        n=st.integers(3, 8),
        seed=st.integers(0, 10**6),
        start=st.sampled_from(["joining", "corrupted"]),
        kind=st.integers(0, 10),
    )
    def setup(self, n: int, seed: int, start: str, kind: int) -> None:
        spec = get_stack(self.STACK)
        self.seed = seed
        self.cluster = PoolCluster(spec, n, seed, fifo=False)
        for node in self.c.peers:
            self.c.command(node, Subscribe(TOPIC))
            self.wanted.add(node)
        self.start = "joining"
        if start == "corrupted":
            self.c.drain()
            kinds = spec.corruption_kinds
            self.start = kinds[kind % len(kinds)]
            assert spec.corrupt is not None
            nodes = {v: self.c.nodes[v] for v in self.c.live}
            rng = random.Random(seed)
            junk = spec.corrupt(self.start, nodes, rng, self.c.params, junk_messages=n)
            for src, dst, message in junk:
                self.c.pool.append(InFlight(src, dst, message))

    # ------------------------------------------------------------------ the network
    @precondition(lambda self: bool(self.c.pool))
    @rule(picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=8))
    def deliver(self, picks: list[int]) -> None:
        for pick in picks:
            if not self.c.pool:
                return
            self.c.deliver(pick % len(self.c.pool))

    @precondition(lambda self: bool(self.c.pool))
    @rule()
    def drain(self) -> None:
        self.c.drain()

    @precondition(lambda self: not self.c.pool and bool(self.c.timers))
    @rule()
    def fire_timer(self) -> None:
        self.c.fire_next_timer()

    @rule()
    def run_for(self) -> None:
        self.c.quiesce(2.0)

    # ------------------------------------------------------------------ membership
    @precondition(lambda self: bool(self.wanted))
    @rule(pick=st.integers(0, 15))
    def unsubscribe(self, pick: int) -> None:
        members = sorted(self.wanted)
        node = members[pick % len(members)]
        self.wanted.discard(node)
        self.c.command(node, Unsubscribe(TOPIC))

    @rule(pick=st.integers(0, 15))
    def subscribe(self, pick: int) -> None:
        peers = self.c.peers
        node = peers[pick % len(peers)]
        self.wanted.add(node)
        self.c.command(node, Subscribe(TOPIC))

    @precondition(lambda self: len(self.c.live) > 3)
    @rule(pick=st.integers(0, 15))
    def crash(self, pick: int) -> None:
        victims = [v for v in self.c.live if v != CONTACT]
        victim = victims[pick % len(victims)]
        self.c.crash(victim)
        self.wanted.discard(victim)
        self.crashed = True

    # ------------------------------------------------------------------ invariants
    @invariant()
    def oracle_holds(self) -> None:
        if self.cluster is None:
            return
        problems = check(self.c)
        counts = [p for p in problems if not p.startswith("topic ")]
        assert not counts, f"holder counts below the truth: {counts[:3]}; {self.where()}"
        if not self.crashed:
            assert not problems, f"{problems[:3]}; {self.where()}"

    def teardown(self) -> None:
        if self.cluster is None:
            return
        c = self.c
        c.drain()
        if any(p.startswith("topic ") for p in check(c)):
            return  # cut by crashes: nothing to converge from (module doc)
        spec = get_stack(self.STACK)
        assert spec.is_legitimate is not None
        n = len(c.live)
        timeout = c.params.timeout
        if self.STACK == "clique":
            rounds = 6 * n * math.log(max(n, 2)) + 50
        else:
            rounds = 40 * math.sqrt(n) + 300
        legitimate = False
        for _ in range(int(rounds / 5) + 1):
            c.quiesce(5 * timeout)
            problems = check(c)
            assert not problems, f"after the faults: {problems[:3]}; {self.where()}"
            if spec.is_legitimate({v: c.nodes[v] for v in c.live}):
                legitimate = True
                break
        assert legitimate, f"not legitimate within {rounds:.0f} rounds; {self.where()}"
        members = sorted(self.wanted)
        if len(members) < 2:
            return
        pub_id = 10**6 + self.next_pub
        before = {v: len(c.delivered[v]) for v in members}
        c.command(members[0], Publish(TOPIC, pub_id, b"x"))
        c.drain()
        for v in members:
            got = [p for t, p, _ in c.delivered[v][before[v] :] if p == pub_id]
            assert len(got) == 1, (
                f"member {v} delivered publication {pub_id} {len(got)} times; {self.where()}"
            )


class CliqueMachine(RelayMachine):
    STACK = "clique"


class D2GMachine(RelayMachine):
    STACK = "d2g"


MODEL_SETTINGS = settings(
    deadline=None, max_examples=150, stateful_step_count=50, derandomize=True, database=None
)
TestCliqueModel = CliqueMachine.TestCase
TestCliqueModel.settings = MODEL_SETTINGS
TestD2GModel = D2GMachine.TestCase
TestD2GModel.settings = MODEL_SETTINGS
