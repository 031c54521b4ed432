"""Convergence and closure of BuildSR under random non-FIFO schedules (papers/000 §5).

Hypothesis draws a corrupted initial state (every kind of :mod:`pubmesh.proto.skipring.
corruption`, n ≤ 64 subscribers, one or two topics, junk messages in flight) and a schedule
seed. The model has no clock: a *round* puts every subscriber's Timeout and ten supervisor
Timeouts (the default ratio of the two periods) into the pool of pending messages, then
delivers pending items in a random order (any pending item, so messages overtake each other and
timers interleave with them) until the pool is empty.

* **Convergence:** within ``ROUNDS`` rounds the state is legitimate (the predicate of
  :mod:`pubmesh.proto.skipring.legitimacy`) at the end of a round.
* **Closure:** from there, ``CLOSURE_ROUNDS`` more rounds keep it legitimate after *every*
  single step.

A failure prints the drawn example (Hypothesis) and the first reasons the state is not
legitimate; replay it with ``.venv/bin/pytest tests/test_skipring_model.py``.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubmesh.proto.core import (
    Input,
    NodeContext,
    Output,
    PeerDown,
    Receive,
    Send,
    StackNode,
    Start,
    Subscribe,
    TimerFired,
)
from pubmesh.proto.skipring.corruption import KINDS, corrupt
from pubmesh.proto.skipring.legitimacy import problems
from pubmesh.proto.skipring.params import SkipRingParams
from pubmesh.proto.skipring.subscriber import Subscriber, Timeout
from pubmesh.proto.skipring.supervisor import Supervisor, SupervisorTimeout

PARAMS = SkipRingParams()
ROUNDS = 150
CLOSURE_ROUNDS = 5
STEP_LIMIT = 200_000


class Cluster:
    """Supervisor 0 and subscribers 1..n, a pool of pending messages and timer firings."""

    def __init__(self, n: int, topics: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.nodes: dict[int, StackNode] = {
            0: Supervisor(NodeContext(0, random.Random(seed), "supervisor", PARAMS))
        }
        for i in range(1, n + 1):
            self.nodes[i] = Subscriber(
                NodeContext(i, random.Random(seed * 7919 + i), "peer", PARAMS)
            )
        self.pending: list[tuple[int, Input]] = []
        for i in sorted(self.nodes):
            self.nodes[i].handle(Start((0,)), 0.0)  # first timers: the rounds fire them
        names = [f"t{k}" for k in range(topics)]
        for i in range(1, n + 1):
            for topic in self.rng.sample(names, self.rng.randint(1, topics)):
                self.apply(i, self.nodes[i].handle(Subscribe(topic), 0.0))
        self.steps = 0

    def apply(self, node: int, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Send):
                if out.dst in self.nodes:
                    self.pending.append((out.dst, Receive(node, out.message)))
                else:
                    self.pending.append((node, PeerDown(out.dst)))

    def step(self) -> None:
        node, event = self.pending.pop(self.rng.randrange(len(self.pending)))
        self.steps += 1
        assert self.steps < STEP_LIMIT, "the pool never empties"
        self.apply(node, self.nodes[node].handle(event, 0.0))

    def round(self, check: bool = False) -> None:
        for i in sorted(self.nodes):
            if i == 0:
                for _ in range(round(PARAMS.timeout_interval / PARAMS.supervisor_interval)):
                    self.pending.append((0, TimerFired(SupervisorTimeout())))
            else:
                self.pending.append((i, TimerFired(Timeout())))
        while self.pending:
            self.step()
            if check:
                reasons = problems(self.nodes, limit=3)
                assert not reasons, f"closure broken after step {self.steps}: {reasons}"

    def legitimate(self) -> bool:
        return not problems(self.nodes, limit=1)


# Derandomized (the same examples on every run, as tests/test_gossip_model.py) and
# parametrized by kind so that every kind gets its share. Measured: ~25 s in all on the shared
# 2-core machine. Hunt for more with derandomize=False and a larger max_examples.
@pytest.mark.parametrize("kind", KINDS)
@settings(deadline=None, max_examples=8, derandomize=True, database=None)
@given(
    n=st.integers(2, 64),
    topics=st.integers(1, 2),
    junk=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_corrupted_states_converge_and_stay_legitimate(
    kind: str, n: int, topics: int, junk: int, seed: int
) -> None:
    cluster = Cluster(n, topics, seed)
    cluster.round()  # the subscriptions are handled, then the state is overwritten
    for dst_src_message in corrupt(kind, cluster.nodes, random.Random(seed), PARAMS, junk):
        src, dst, message = dst_src_message
        cluster.pending.append((dst, Receive(src, message)))
    where = f"n={n} topics={topics} kind={kind} junk={junk} seed={seed}"
    for rounds in range(1, ROUNDS + 1):  # noqa: B007 (reported below)
        cluster.round()
        if cluster.legitimate():
            break
    else:
        raise AssertionError(
            f"not legitimate after {ROUNDS} rounds ({where}): {problems(cluster.nodes, 5)}"
        )
    for _ in range(CLOSURE_ROUNDS):
        cluster.round(check=True)
    print(f"{where}: legitimate after {rounds} rounds")
