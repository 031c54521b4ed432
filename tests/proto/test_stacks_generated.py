"""Tests every stack gets without writing them: generated from the stack registry.

Every stack of a spec module (``pubmesh.stacks.*`` and ``$PUBMESH_STACK_MODULES``; the test
suite adds the tiny hub stack of ``tests/tinystack`` that way) is checked for:

* **determinism across processes**: the same scenario and seed give the same trace, byte for
  byte, from two ``pubmesh sim`` processes with different hash seeds;
* **hostile input**: every handler of every node (each role) takes any registered message of
  any stack from any sender, failure notices of nodes that never existed, timers of other
  layers, and odd commands, without raising and with only contract outputs;
* **liveness after a fault-free quiesce**: once the cluster has settled, every publication
  reaches every live subscriber of its topic exactly once, from every publisher, over seeds;
* **statistics**: one ``NodeStatistics`` shape, JSON-able, its delivery count the node's.
* **the layer contract**: the fast entry points both runtimes call (``receive``, ``fire``) give
  the outputs ``handle`` gives, input by input over a whole simulated run; a planted
  divergence is caught.

The network runtime's generated checks (a 12-process cluster, a quarter of it killed; the same
scenario delivering the same pairs in the simulator and over TCP) are in
tests/net/test_net_cluster.py, parametrized over the same list. A failure names the stack and the
seed, and the command that replays it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pubmesh.harness import PoolCluster
from pubmesh.proto.core import (
    MESSAGE_TYPES,
    Command,
    Input,
    Leave,
    NodeStatistics,
    Output,
    PeerDown,
    Publish,
    Receive,
    Subscribe,
    Timer,
    TimerFired,
    Unsubscribe,
)
from pubmesh.stacks.base import discovered_stacks, get_stack

ROOT = Path(__file__).resolve().parents[2]
STACKS = discovered_stacks()
SEEDS = range(1, 6)
#: simulated seconds a fault-free cluster gets to settle (joins, rings, first timeouts)
SETTLE = 60.0

#: a small scenario any stack can run: per-message latency (so delivery is non-FIFO), a crash,
#: publications from subscribers and from any node
SCENARIO = """
[run]
stack = "{stack}"
nodes = 16
seed = 7
duration = 20.0
start_spread = 1.0
[network]
latency = {{ dist = "lognormal", median = 0.01, sigma = 0.8 }}
detection_delay = 0.3
timer_jitter = 0.1
[workload]
topics = 3
subscriptions_per_node = 2
publications = 40
publish_start = 8.0
publish_rate = 5.0
publisher = "any"
[[faults]]
at = 12.0
kind = "crash"
fraction = 0.2
[trace]
messages = "full"
snapshot_interval = 5.0
"""


def test_the_registry_holds_the_real_stacks_and_the_tiny_one() -> None:
    """The generated tests below run over these; the tiny stack is here by its spec alone."""
    assert {"gossip", "skipring", "tiny"} <= set(STACKS), STACKS


# --------------------------------------------------------------------------------- determinism
def _sim(scenario: Path, out: Path, hash_seed: str) -> None:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    command = [sys.executable, "-m", "pubmesh", "sim", str(scenario), "--out", str(out), "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr}"


@pytest.mark.parametrize("stack", STACKS)
def test_same_scenario_same_trace_bytes_across_processes(stack: str, tmp_path: Path) -> None:
    scenario = tmp_path / f"{stack}.toml"
    scenario.write_text(SCENARIO.format(stack=stack))
    _sim(scenario, tmp_path / "a", "1")
    _sim(scenario, tmp_path / "b", "2")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.parquet"))
    assert len(files) >= 8, files  # runs, nodes, subscriptions, publications, deliveries, ...
    deliveries = (tmp_path / "a" / "deliveries").rglob("*.parquet")
    assert sum(p.stat().st_size for p in deliveries) > 0
    for name in files:
        a = (tmp_path / "a" / name).read_bytes()
        b = (tmp_path / "b" / name).read_bytes()
        assert a == b, f"{stack}: {name} differs between two processes (pubmesh sim {scenario})"


# ------------------------------------------------------------------------------- hostile input
class ForeignTimer(Timer):
    """A timer no layer of any stack set."""


def _message(cls: type) -> st.SearchStrategy[object]:
    """Any instance of a message class; a ``topic`` field names a topic the nodes run half of
    the time, so the junk reaches the protocol instances rather than being dropped at once."""
    import typing
    from dataclasses import fields

    names = {f.name for f in fields(cls)}
    kwargs: dict[str, st.SearchStrategy[object]] = {}
    if "topic" in names:
        kwargs["topic"] = st.one_of(st.just("t0"), st.text(max_size=6))
    # JSON-valued fields (content attributes: Mapping[str, Any]) get JSON values, since
    # Hypothesis has no strategy for Any
    for name, hint in typing.get_type_hints(cls).items():
        if name in names and "Any" in repr(hint):
            kwargs[name] = st.dictionaries(st.text(max_size=5), _JSON_VALUES, max_size=3)
    return st.builds(cls, **kwargs)


_JSON_VALUES: st.SearchStrategy[object] = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)
)


def _stack_messages() -> list[tuple[int, type]]:
    """The messages of the stacks under test (pubmesh's and those of spec modules' packages),
    not those of the runtime probe stacks some test modules register."""
    packages = {"pubmesh"} | {get_stack(s).create.__module__.split(".")[0] for s in STACKS}
    return sorted(
        (tag, cls) for tag, cls in MESSAGE_TYPES.items() if cls.__module__.split(".")[0] in packages
    )


def _hostile_inputs() -> st.SearchStrategy[Input]:
    messages = st.sampled_from(_stack_messages()).flatmap(lambda item: _message(item[1]))
    node_ids = st.one_of(st.integers(-3, 12), st.integers(-(2**62), 2**62))
    topics = st.one_of(st.sampled_from(["t0", "t1"]), st.text(max_size=8))
    commands: st.SearchStrategy[Command] = st.one_of(
        st.builds(Subscribe, topics),
        st.builds(Unsubscribe, topics),
        st.builds(Publish, topics, st.integers(-5, 2**62), st.binary(max_size=16)),
        st.just(Leave()),
    )
    return st.one_of(
        st.builds(Receive, node_ids, messages),
        st.builds(PeerDown, node_ids),
        st.builds(TimerFired, st.just(ForeignTimer())),
        commands,
    )


def _contract_output(out: object) -> bool:
    from pubmesh.proto.core import Deliver, Disconnect, Send, SetTimer, TraceRecord

    return isinstance(out, Send | Deliver | SetTimer | Disconnect | TraceRecord)


@functools.cache
def _settled(stack: str) -> PoolCluster:
    """Six nodes of ``stack``, every peer subscribed to t0, settled for 2 s: the state every
    example of the hostile-input test starts from. Built once per stack and deep-copied per
    example (building and settling it again was most of the test's cost); the
    harness is deterministic, so the copy is the cluster a fresh build would give."""
    cluster = PoolCluster(get_stack(stack), 6, seed=3)
    for node in cluster.peers:
        cluster.command(node, Subscribe("t0"))
    cluster.quiesce(2.0)
    return cluster


@pytest.mark.parametrize("stack", STACKS)
@settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(events=st.lists(st.tuples(st.integers(0, 5), _hostile_inputs()), min_size=1, max_size=30))
def test_every_handler_survives_hostile_input(stack: str, events: list[tuple[int, Input]]) -> None:
    """Junk from the network and odd commands never make a node raise: each is ignored or
    handled, and what comes out is the contract's outputs only (docs/design.md "Invariants")."""
    cluster = copy.deepcopy(_settled(stack))
    for node, event in events:
        outputs: list[Output] = cluster.nodes[node].handle(event, cluster.now)
        bad = [o for o in outputs if not _contract_output(o)]
        assert not bad, f"{stack}: node {node} answered {event!r} with {bad!r}"
    cluster.quiesce(2.0)  # and the consequences of the junk do not break it either


# ------------------------------------------------------------------------------------ liveness
@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("seed", SEEDS)
def test_after_a_fault_free_quiesce_every_subscriber_gets_every_publication(
    stack: str, seed: int
) -> None:
    replay = f"pytest tests/proto/test_stacks_generated.py -k 'quiesce and {stack} and {seed}'"
    cluster = PoolCluster(get_stack(stack), 10, seed)
    peers = cluster.peers
    assert len(peers) >= 8, peers
    subscribers = {"t0": peers[::2], "t1": peers[1::3]}
    for topic, nodes in subscribers.items():
        for node in nodes:
            cluster.command(node, Subscribe(topic))
    cluster.quiesce(SETTLE)
    published: dict[str, set[int]] = {"t0": set(), "t1": set()}
    for index, publisher in enumerate(peers):  # subscribers and non-subscribers publish
        topic = "t0" if index % 2 == 0 else "t1"
        pub_id = 1000 * seed + index
        cluster.command(publisher, Publish(topic, pub_id, pub_id.to_bytes(8, "big")))
        published[topic].add(pub_id)
        cluster.quiesce(1.0)
    cluster.quiesce(SETTLE)
    for topic, nodes in subscribers.items():
        for node in nodes:
            got = [pub for t, pub, _ in cluster.delivered[node] if t == topic]
            assert sorted(got) == sorted(published[topic]), (
                f"{stack} seed {seed}: node {node} delivered {sorted(got)} of "
                f"{sorted(published[topic])} on {topic} ({replay})"
            )
    for node in cluster.live:
        if node not in subscribers["t0"] + subscribers["t1"]:
            assert cluster.delivered[node] == [], (
                f"{stack} seed {seed}: {node} subscribes to nothing"
            )


# ---------------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("stack", STACKS)
def test_statistics_have_one_shape_and_count_the_deliveries(stack: str) -> None:
    cluster = PoolCluster(get_stack(stack), 6, seed=2)
    for node in cluster.peers:
        cluster.command(node, Subscribe("t0"))
    cluster.quiesce(SETTLE)
    cluster.command(cluster.peers[0], Publish("t0", 1, b"x"))
    cluster.quiesce(5.0)
    for node in cluster.live:
        stats = cluster.nodes[node].statistics()
        assert isinstance(stats, NodeStatistics)
        json.dumps(stats.as_dict())
        assert stats.delivered == len(cluster.delivered[node]), (stack, node, stats)
        if node in cluster.peers:
            assert stats.topics == ("t0",) and stats.delivered == 1, (stack, node, stats)


# ------------------------------------------------------------------------- the layer contract
class EntryPointDivergence(AssertionError):
    """A node's fast entry point (``receive``/``fire``) gave other outputs than ``handle``."""


class _OneEntryPoint:
    """A node seen by the simulator through one entry point: ``fast`` hands each message and
    timer to the node's fast path (``receive``/``fire``, what both runtimes call); otherwise
    to ``handle(Receive(...))`` / ``handle(TimerFired(...))``. Every input and its outputs go
    to the run's shared ``log``, in the order the simulator made the calls."""

    def __init__(self, inner: object, fast: bool, log: list[tuple[int, Input, list[Output]]]):
        self.inner = inner
        self.fast = fast
        self.log = log

    def receive(self, src: int, message: object, now: float) -> list[Output]:
        event = Receive(src, message)
        out = self.inner.receive(src, message, now) if self.fast else self.inner.handle(event, now)
        self.log.append((self.inner.node_id, event, list(out)))
        return out  # type: ignore[no-any-return]

    def fire(self, timer: Timer, now: float) -> list[Output]:
        event = TimerFired(timer)
        out = self.inner.fire(timer, now) if self.fast else self.inner.handle(event, now)
        self.log.append((self.inner.node_id, event, list(out)))
        return out  # type: ignore[no-any-return]

    def handle(self, event: Input, now: float) -> list[Output]:
        return self.inner.handle(event, now)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def _run_through(stack: str, fast: bool, create: object) -> list[tuple[int, Input, list[Output]]]:
    from pubmesh.scenario.model import parse_scenario
    from pubmesh.sim.engine import Simulation

    sim = Simulation(parse_scenario(SCENARIO.format(stack=stack)), None)
    factory = create if create is not None else sim.spec.create
    log: list[tuple[int, Input, list[Output]]] = []
    sim.spec = dataclasses.replace(
        sim.spec, create=lambda ctx: _OneEntryPoint(factory(ctx), fast, log)
    )
    sim.run()
    return log


def _simulate_both_ways(stack: str, create: object = None) -> int:
    """Run :data:`SCENARIO` on ``stack`` twice in the simulator, every node's messages and
    timers through its fast path in one run and through ``handle`` in the other (``create``
    replaces the stack's node factory: the planted divergence below), and compare the two
    runs input by input: the same node, the same input, the same outputs in the same order.
    The simulator is deterministic, so the runs take the same inputs for as long as the nodes
    answer alike; the first input answered differently is named. How many inputs were
    compared; raises EntryPointDivergence.

    This replaced a deep copy of the node before every input (the copy taking
    ``handle``, the node its fast path), which cost a chord node's whole state per input; two
    runs check every input of the run as that did, and also catch a fast path that leaves
    the node in another state than ``handle`` would, once that state shows in an output."""
    fast = _run_through(stack, True, create)
    slow = _run_through(stack, False, create)
    for index, ((node, event, got), (_, other, want)) in enumerate(zip(fast, slow, strict=False)):
        if (event, got) != (other, want):
            raise EntryPointDivergence(
                f"{stack}: node {node} at input {index}, {event!r}:\n"
                f"  receive/fire gave {got!r}\n  handle gave       {want!r}"
            )
    if len(fast) != len(slow):
        raise EntryPointDivergence(
            f"{stack}: the fast path's run took {len(fast)} inputs, handle's {len(slow)}"
        )
    return len(fast)


@pytest.mark.parametrize("stack", STACKS)
def test_both_entry_points_give_the_same_outputs(stack: str) -> None:
    """The layer contract (pubmesh.proto.core): ``receive``/``fire`` behave exactly as
    ``handle`` does. Both runtimes call the fast path; the test harness and the hostile-input
    test call ``handle``; every message and timer of a whole simulated run (joins, a crash,
    publications under jitter) goes through both, in two runs compared input by input."""
    compared = _simulate_both_ways(stack)
    assert compared > 500, f"{stack}: only {compared} inputs went through the fast path"


def test_the_contract_check_catches_a_planted_divergence() -> None:
    """A node whose fast path gives the same outputs as ``handle`` but in another order (the
    runtimes apply outputs in order: a timer set before or after a send is another run) is
    caught, named, with the input."""
    tiny = get_stack("tiny")
    node_class = tiny.create

    class Reordering(node_class):
        def receive(self, src: int, message: object, now: float) -> list[Output]:
            return list(reversed(super().receive(src, message, now)))

    with pytest.raises(EntryPointDivergence, match=r"tiny: node \d+ .*Receive") as caught:
        _simulate_both_ways("tiny", create=Reordering)
    assert "receive/fire gave" in str(caught.value)
