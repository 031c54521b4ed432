"""docs/protocols/relay.md §9 C6 and C7 for the ``d2g`` stack (Scheideler's lecture §9.3,
Build-D2G), measured on simulated runs of ``scenarios/d2g_corrupted.toml`` (latency U(2, 20) ms,
non-FIFO, timer jitter 0.1, T = 0.5 s; a round is one T).

* C6: from ``random_graph`` at n ∈ {16, 64} over ``SEEDS``, run 40√n + 300 rounds; over the
  snapshots (every 5T) after a burn-in of 300 rounds: the mean out-degree m against
  √(n ln n) within [0.8, 1.15], max |N| ≤ 6√n, strongly connected in ≥ 98% of the
  snapshots (of all seeds), at most 5% of pairs more than 2 hops apart (n ≥ 64; make test
  holds it on C7's run, n = 64 seed 1), P[N has a twin] at dequeue within 0.1 of the
  birthday value 1 − e^{−m(m−1)/2n}; the relay-graph oracle at every snapshot.
  ``literal = true`` (the slides as written) collapses: more than half of the members end
  with in-degree 0 at n = 64. n = 256 is in BENCHMARKS.md (bench/bench_relay.py).
* From every d2g corruption kind of spec §6 (random_graph, line, star, sets, junk) at
  n ∈ {16, 32}: legitimate (spec §5) within 40√n + 300 rounds, the oracle holding at every
  snapshot (d2g's closure is statistical only, spec §5: the shares above are its measure).
* Leave (the clique's, spec §3, with §4's rules for a leaver: AskForConnect's u and a
  received Connect are filed for reversal) at n = 32 from a warm group, 1 and 10% of the
  subscribers at once: each leaver stops within 50 + 5n rounds with no relay pointing at it,
  the oracle holding at every snapshot, and the stayers are legitimate again.
* C9 (ours): small steady groups (about eight members) under jittered latency lose no
  member to a sink pair or to a reference in transit (test_c9_…).
* C7: after C6's run, 100 publications reach every member (reliability 1.0), in ≤ 2 hops for
  ≥ 95% of the deliveries, the spec says; measured, 63% within 2 hops and 99% within 4, which
  is what the test holds (test_c7_…). Every member is within 2 hops of the publisher in the
  digraph for ≥ 95% of the pairs.

A failure names the seed and the command that replays the run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pubmesh.proto.core import Unsubscribe
from pubmesh.proto.d2g.corruption import KINDS
from pubmesh.proto.d2g.legitimacy import is_legitimate, shapes
from pubmesh.proto.d2g.node import D2GNode
from pubmesh.scenario.model import load_scenario
from pubmesh.sim.engine import Simulation
from support.figures import publication_figures, replay
from support.relayoracle import check_sim
from support.reliability import delivered_pairs, expected_pairs
from support.tiers import tiered

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = "scenarios/d2g_corrupted.toml"
T = 0.5
SNAPSHOT = 5 * T
BURN_IN = 300
SEEDS = (1, 2, 3)


@dataclass
class Shape:
    """C6's figures over the snapshots after the burn-in."""

    n: int
    degree: list[float] = field(default_factory=list)
    largest: int = 0
    connected: list[bool] = field(default_factory=list)
    far: list[float] = field(default_factory=list)
    dequeues: int = 0
    with_twin: int = 0
    indegree_zero: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def m(self) -> float:
        return statistics.mean(self.degree)

    @property
    def twin_rate(self) -> float:
        return self.with_twin / self.dequeues if self.dequeues else 0.0

    @property
    def birthday(self) -> float:
        m = self.m
        return 1 - math.exp(-m * (m - 1) / (2 * self.n))


def _counters(sim: Simulation) -> tuple[int, int]:
    nodes = [n for n in sim.nodes.values() if isinstance(n, D2GNode)]
    return (
        sum(n.counters.get("dequeues", 0) for n in nodes),
        sum(n.counters.get("dequeues_with_twin", 0) for n in nodes),
    )


def run_c6(
    n: int, seed: int, *extra: str, run_dir: Path | None = None
) -> tuple[Shape, Simulation, str]:
    sets = (f"run.nodes={n}", "init.corruption=random_graph", f"init.junk_messages={n}", *extra)
    where = replay(SCENARIO, seed, *sets)
    scenario = load_scenario(ROOT / SCENARIO, [*sets, f"run.seed={seed}"])
    sim = Simulation(scenario, run_dir, keep_deliveries=run_dir is not None)
    began = max(sim.plan.starts.values()) + scenario.workload.subscribe_at
    end = began + (40 * math.sqrt(n) + 300) * T
    shape = Shape(n)
    t, start = 0.0, (0, 0)
    while t + SNAPSHOT <= end:
        t += SNAPSHOT
        sim.run(until=t)
        if t < began:
            continue
        shape.problems += [f"t={t:.1f}: {p}" for p in check_sim(sim)[:3]]
        if (t - began) / T < BURN_IN:
            start = _counters(sim)
            continue
        groups = shapes(sim.nodes)
        assert groups is not None, f"t={t}: a leaving or missing instance; {where}"
        group = groups["t0"]
        sizes = list(group.sizes.values())
        shape.degree.append(statistics.mean(sizes))
        shape.largest = max(shape.largest, max(sizes))
        shape.connected.append(group.direct and group.strongly_connected())
        shape.far.append(group.far_fraction())
    done = _counters(sim)
    shape.dequeues, shape.with_twin = done[0] - start[0], done[1] - start[1]
    groups = shapes(sim.nodes)
    assert groups is not None, where
    pointed = {w for targets in groups["t0"].out.values() for w in targets}
    shape.indegree_zero = sum(1 for v in groups["t0"].out if v not in pointed) / n
    return shape, sim, where


#: the far-pairs bound is the spec's for n ≥ 64 only: at n = 16 the spec measured 5.4% and the
#: suite 4.75% (BENCHMARKS.md), a size where "at most 5%" says nothing about the digraph's
#: diameter
FAR_PAIRS_FROM = 64


def check_c6_seed(shape: Shape, seed: int, where: str) -> None:
    """C6's figures of one seed's run: the oracle, degree, max |N|, far pairs (n ≥ 64), twins."""
    n = shape.n
    ratio = shape.m / math.sqrt(n * math.log(n))
    connected = sum(shape.connected) / len(shape.connected)
    far = statistics.mean(shape.far)
    print(
        f"C6 n={n} seed {seed}: m/√(n ln n) = {ratio:.2f}, max |N|/√n = "
        f"{shape.largest / math.sqrt(n):.2f}, strongly connected {connected:.1%}, far pairs "
        f"{far:.2%} (max {max(shape.far):.2%}), P[twin] {shape.twin_rate:.2f} against "
        f"{shape.birthday:.2f}"
    )
    assert not shape.problems, f"{shape.problems[:3]}; {where}"
    assert 0.8 <= ratio <= 1.15, f"m/√(n ln n) = {ratio:.2f}; {where}"
    assert shape.largest <= 6 * math.sqrt(n), f"max |N| = {shape.largest}; {where}"
    if n >= FAR_PAIRS_FROM:  # make test: C7's run at n = 64
        assert far <= 0.05, f"far pairs {far:.2%}; {where}"
    assert abs(shape.twin_rate - shape.birthday) <= 0.1, (
        f"P[twin] {shape.twin_rate:.2f} against {shape.birthday:.2f}; {where}"
    )


@pytest.mark.parametrize("n", tiered([16], [64]))
def test_c6_degree_connectivity_far_pairs_and_twins(n: int) -> None:
    """Per seed: degree, max |N|, far pairs, twins; over the snapshots of all seeds: the
    share strongly connected (the spec's figure is a share of snapshots).

    make test runs n = 16 here, where the far-pairs bound does not apply; the per-seed
    figures at n = 64, the far pairs among them, are asserted in make test on seed 1 by C7,
    whose run is C6's (test_c7_…), and here in make figures on every seed."""
    snapshots: list[bool] = []
    for seed in SEEDS:
        shape, _, where = run_c6(n, seed)
        check_c6_seed(shape, seed, where)
        snapshots += shape.connected
    share = sum(snapshots) / len(snapshots)
    print(f"C6 n={n}: strongly connected in {share:.1%} of {len(snapshots)} snapshots")
    assert share >= 0.98, f"strongly connected in {share:.1%} of the snapshots (seeds {SEEDS})"


def test_c6_the_literal_rule_collapses() -> None:
    """spec §4: without the in-link repair, the cap and the rejoin, a member nobody points at
    is never sampled again."""
    for seed in SEEDS:
        shape, _, where = run_c6(64, seed, "stack.d2g.literal=true")
        print(f"C6 literal n=64 seed {seed}: in-degree 0 for {shape.indegree_zero:.0%}")
        assert shape.indegree_zero > 0.5, f"in-degree 0: {shape.indegree_zero:.0%}; {where}"


#: C7's hop shares, the share of first deliveries (the publisher's own excluded) within 2 and
#: within 4 hops: measured 63.0% and 99.3% at n = 64, seed 1 (test_c7_…'s docstring)
WITHIN_2_HOPS = 0.60
WITHIN_4_HOPS = 0.95


def test_c7_flooding_reaches_everyone_within_two_hops_of_the_publisher(tmp_path: Path) -> None:
    """C7: 100 publications after C6's run at n = 64, seed 1 (the scenario's, at t =
    320..330 s): reliability 1.0; every member within 2 hops of the publisher in the digraph
    at the time of publishing for ≥ 95% of the (publication, member) pairs; and the hops the
    deliveries took. The run's C6 figures are asserted too (far pairs ≤ 5% among them: this
    is where make test holds C6 at n = 64).

    The spec's claim, "≤ 2 hops for ≥ 95% of the deliveries", does NOT hold. It reasons that
    hops equal the directed distance. They do not: a flood delivers the first copy to arrive,
    and with per-message latency U(2, 20) ms a 3-hop copy often beats a 2-hop one (the seen
    set of a 2-hop sender cannot name what the other 1-hop senders sent to). Measured over
    the 6,200 first deliveries (100 publications × 62 members other than the publisher and
    the contact): 1 hop 23.2%, 2 hops 39.8%, 3 hops 28.8%, 4 hops 7.5%, 5 and 6 hops 0.7%;
    ≤ 2 hops for 63.0%, ≤ 3 for 91.8%, ≤ 4 for 99.3%. Asserted: ≤ 2 hops for ≥ 60% and
    ≤ 4 hops for ≥ 95% (the spec's share at the hop count the flood attains), and the
    distance at the spec's 95%."""
    n, seed = 64, 1
    shape, sim, where = run_c6(n, seed, run_dir=tmp_path)
    check_c6_seed(shape, seed, where)
    graphs = []
    t = sim.now
    while t < sim.scenario.run.duration:
        groups = shapes(sim.nodes)
        assert groups is not None, where
        graphs.append((t, groups["t0"]))
        t += 0.05
        sim.run(until=t)
    sim.run()
    sim.close()
    figures = publication_figures(sim, tmp_path)
    assert len(figures) == 100, where
    for pub in figures:
        assert pub.expected == n - 1 and pub.reliability == 1.0, f"{pub}; {where}"
    publishers = {
        row["pub_id"]: (row["t"], row["publisher"])
        for row in pq.read_table(tmp_path / "publications").to_pylist()
    }
    near = total = 0
    for pub in figures:
        at, publisher = publishers[pub.pub_id]
        graph = max((g for g in graphs if g[0] <= at), key=lambda g: g[0])[1]
        first = graph.out[publisher]
        reach = set(first).union(*(graph.out[w] for w in first)) - {publisher}
        near += len(reach)
        total += n - 1
    # the first delivery at each member but the publisher (its own, at 0 hops, is no hop)
    hops = [h for pub in figures for v, h in pub.hops.items() if v != publishers[pub.pub_id][1]]
    assert len(hops) == 100 * (n - 2), where  # every member but the contact and the publisher
    within_2 = sum(1 for h in hops if h <= 2) / len(hops)
    within_4 = sum(1 for h in hops if h <= 4) / len(hops)
    print(
        f"C7 d2g n={n}: {near / total:.1%} of (publication, member) pairs within 2 hops of the "
        f"publisher; the first copies took ≤ 2 hops for {within_2:.1%} of the deliveries, ≤ 4 "
        f"for {within_4:.1%} (max {max(hops)}; the spec claims ≤ 2 for ≥ 95%)"
    )
    assert near / total >= 0.95, f"{near / total:.1%} within 2 hops; {where}"
    assert within_2 >= WITHIN_2_HOPS, f"{within_2:.1%} of deliveries within 2 hops; {where}"
    assert within_4 >= WITHIN_4_HOPS, f"{within_4:.1%} of deliveries within 4 hops; {where}"


@pytest.mark.parametrize("n", [16, 32])
@pytest.mark.parametrize("kind", KINDS)
def test_d2g_converges_from_every_corruption(kind: str, n: int) -> None:
    for seed in SEEDS if n == 16 else SEEDS[:1]:
        sets = (f"run.nodes={n}", f"init.corruption={kind}", f"init.junk_messages={n}")
        where = replay(SCENARIO, seed, *sets)
        scenario = load_scenario(ROOT / SCENARIO, [*sets, f"run.seed={seed}"])
        sim = Simulation(scenario, None, keep_deliveries=False)
        began = max(sim.plan.starts.values()) + scenario.workload.subscribe_at
        limit = began + (40 * math.sqrt(n) + 300) * T
        t, reached = 0.0, None
        while t < limit and reached is None:
            t += SNAPSHOT
            sim.run(until=t)
            if t < began:
                continue
            problems = check_sim(sim)
            assert not problems, f"t={t:.1f}: {problems[:3]}; {where}"
            if is_legitimate(sim.nodes):
                reached = (t - began) / T
        assert reached is not None, f"{kind}: not legitimate within the bound; {where}"


@pytest.mark.parametrize("share", [0.0, 0.1])
def test_d2g_leavers_stop_and_the_rest_stays_connected(share: float) -> None:
    n = 32
    for seed in SEEDS:
        sets = (f"run.nodes={n}", "init.corruption=none", "init.overlay=warm",
                "workload.publications=0")  # fmt: skip
        where = replay(SCENARIO, seed, *sets)
        sim = Simulation(load_scenario(ROOT / SCENARIO, [*sets, f"run.seed={seed}"]), None)
        t = 5 * SNAPSHOT
        sim.run(until=t)
        subscribers = sorted(v for v in sim.nodes if v != 0)
        leavers = sorted(sim._corrupt_rng.sample(subscribers, max(1, int(share * (n - 1)))))
        for v in leavers:
            sim.command(v, Unsubscribe("t0"))
        left_at, stopped = t, {}
        while len(stopped) < len(leavers) or not is_legitimate(sim.nodes):
            t += SNAPSHOT
            sim.run(until=t)
            problems = check_sim(sim)
            assert not problems, f"t={t:.1f}: {problems[:3]}; {where}"
            for v in leavers:
                node = sim.nodes[v]
                assert isinstance(node, D2GNode)
                if v not in stopped and "t0" not in node.instances:
                    stopped[v] = (t - left_at) / T
            assert (t - left_at) / T <= 50 + 5 * n + 40 * math.sqrt(n) + 300, (
                f"leavers stopped: {stopped} of {leavers}; {where}"
            )
        late = {v: r for v, r in stopped.items() if r > 50 + 5 * n}
        assert not late, f"stopped after {late} rounds (> 50 + 5n); {where}"
        pointing = [
            (v, relay.rid)
            for v, node in sim.nodes.items()
            if isinstance(node, D2GNode)
            for relay in node.layer.relays.values()
            if relay.next is not None and relay.next[0] in leavers and relay.next[1] != 0
        ]
        assert not pointing, f"relays still point at leavers: {pointing[:5]}; {where}"
        print(
            f"d2g leave {share:.0%} seed {seed}: stopped within {max(stopped.values()):.0f} rounds"
        )


#: twelve nodes, three topics of about eight members each, subscribing within a second, then
#: 40 publications at 20/s: small groups, where d2g's digraph is sparsest (the scenario of
#: tests/net/test_net_cluster.py's twelve-process test), with jittered latency
JITTERED = """
[run]
stack = "d2g"
nodes = 12
seed = {seed}
duration = 8.0
start_spread = 1.0
[network]
latency = {{ dist = "lognormal", median = 0.002, sigma = 1.0 }}
[workload]
topics = 3
subscriptions_per_node = 2
subscribe_at = 0.2
publications = 40
publish_start = 2.5
publish_rate = 20.0
payload_size = 64
"""


@pytest.mark.parametrize("seed", [4, 39, 63, 81])
def test_c9_small_groups_under_jitter_lose_no_member_to_a_sink_pair(
    seed: int, tmp_path: Path
) -> None:
    """C9 (ours): every subscriber of a small steady group gets every publication.

    With spec §4's in-link repair alone these four seeds (of 0..99) lost 16, 1, 18 and 22
    deliveries: at 4, 63 and 81 two members pointed only at each other for up to 1.3 s, a
    sink component that floods from outside miss and no rule of the spec breaks up; at 39 a
    member's only counted holder held nothing but a reference to it in transit.
    D2GNode._in_repair mends both (ours); bench/bench_d2g_jitter.py measures the 100 seeds
    and a wider jitter, where single missed publications remain (BENCHMARKS.md)."""
    from pubmesh.scenario.model import parse_scenario
    from pubmesh.sim.runner import run_scenario

    run_scenario(parse_scenario(JITTERED.format(seed=seed)), tmp_path)
    expected = expected_pairs(tmp_path)
    missing = sorted(expected - delivered_pairs(tmp_path))
    assert len({pub_id for pub_id, _ in expected}) == 40 and len(expected) > 200, len(expected)
    assert not missing, (
        f"{len(missing)} of {len(expected)} deliveries missing {missing[:8]}; seed {seed}; "
        f"replay: the JITTERED scenario of {__file__} with seed = {seed}, pubmesh sim"
    )
