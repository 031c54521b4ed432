"""The simulator's own features, on the tiny probe stack (tests/simstacks.py), where the
expected outcome can be worked out by hand."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import simstacks  # noqa: F401  (registers the probe stack)
from pubmesh.proto.core import Publish, Subscribe
from pubmesh.sim.engine import Simulation
from pubmesh.sim.runner import run_scenario
from pubmesh.sim.scenario import parse_scenario

BASE = """
[run]
stack = "probe"
nodes = 10
seed = {seed}
duration = 20.0
start_spread = 0.0
[network]
latency = {latency}
loss = {loss}
detection_delay = 0.5
[workload]
topics = 1
subscriptions_per_node = 1
publications = {pubs}
publish_start = 2.0
publish_rate = 2.0
[stack.probe]
ring_size = 10
"""


def scenario(
    seed: int = 1,
    latency: str = '{ dist = "uniform", min = 0.01, max = 0.05 }',
    loss: float = 0.0,
    pubs: int = 4,
    extra: str = "",
):
    return parse_scenario(BASE.format(seed=seed, latency=latency, loss=loss, pubs=pubs) + extra)


def test_probe_flood_reaches_every_node_in_ring_order():
    sim = Simulation(scenario())
    sim.run()
    # every publication goes around the ring of 10 once: each node delivers it once
    by_pub: dict[int, list[tuple[int, int]]] = {}
    for pub_id, node, _t, hops in sim.deliveries:
        by_pub.setdefault(pub_id, []).append((node, hops))
    assert sorted(by_pub) == [0, 1, 2, 3]
    for deliveries in by_pub.values():
        assert len(deliveries) == 10
        assert sorted(h for _n, h in deliveries) == list(range(10))


def test_constant_latency_is_fifo_and_exact():
    sim = Simulation(scenario(latency='{ dist = "constant", value = 0.25 }'), None)
    sim.run()
    first = {}
    for pub_id, _node, t, hops in sim.deliveries:
        first.setdefault(pub_id, t)
        assert math.isclose(t, first[pub_id] + 0.25 * hops, abs_tol=1e-9)


def test_lognormal_latency_reorders_messages(tmp_path: Path):
    # Per-message latency: messages on the same link overtake each other (non-FIFO).
    s = scenario(latency='{ dist = "lognormal", median = 0.05, sigma = 1.0 }', pubs=0)
    s = s.with_overrides(["stack.probe.ping_interval=0.02", "run.duration=5.0"])
    run_scenario(s, tmp_path)
    msgs = pq.read_table(tmp_path / "messages").to_pandas()
    pings = msgs[msgs.type == "ProbePing"].sort_values("t_send")
    reordered = 0
    for _link, group in pings.groupby(["src", "dst"]):
        recv = list(group.t_recv)
        reordered += sum(1 for a, b in itertools.pairwise(recv) if b < a)
    assert reordered > 0


def test_uniform_latency_within_bounds(tmp_path: Path):
    run_scenario(scenario(latency='{ dist = "uniform", min = 0.1, max = 0.2 }'), tmp_path)
    msgs = pq.read_table(tmp_path / "messages").to_pandas().dropna(subset=["t_recv"])
    lat = msgs.t_recv - msgs.t_send
    assert lat.min() >= 0.1 - 1e-12 and lat.max() <= 0.2 + 1e-12


def test_loss_rate_matches_setting(tmp_path: Path):
    s = scenario(loss=0.3, pubs=0, extra="").with_overrides(["run.duration=200.0"])
    run_scenario(s, tmp_path)
    msgs = pq.read_table(tmp_path / "messages")
    lost = pc.sum(pc.is_null(msgs["t_recv"])).as_py()
    n = msgs.num_rows
    # binomial: 5 standard deviations around 0.3
    assert abs(lost / n - 0.3) < 5 * math.sqrt(0.3 * 0.7 / n), (lost, n)


def test_crash_notifies_monitors_after_detection_delay():
    s = scenario(pubs=0, extra='[[faults]]\nat = 5.0\nkind = "crash"\nnodes = [3]\n')
    sim = Simulation(s)
    sim.run()
    assert 3 not in sim.alive and 3 in sim.crashed
    watcher = sim.nodes[2]  # node 2 monitors its ring successor 3
    assert watcher.downs[0] == (pytest.approx(5.5), 3)
    # later pings to the dead node are failed sends, reported again after the delay
    assert len(watcher.downs) > 1
    assert all(peer == 3 for _t, peer in watcher.downs)
    assert all(not any(p == 3 for _t, p in sim.nodes[n].downs) for n in sim.nodes if n != 2)


def test_partition_cuts_messages_and_heal_restores(tmp_path: Path):
    extra = (
        '[[faults]]\nat = 4.0\nkind = "partition"\ngroups = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]\n'
        '[[faults]]\nat = 8.0\nkind = "heal"\n'
    )
    s = scenario(pubs=0, extra=extra)
    run_scenario(s, tmp_path)
    msgs = pq.read_table(tmp_path / "messages").to_pandas()
    crossing = msgs[(msgs.src < 5) != (msgs.dst < 5)]
    during = crossing[(crossing.t_send >= 4.0) & (crossing.t_send < 8.0)]
    after = crossing[crossing.t_send >= 8.0]
    assert len(during) > 0 and during.t_recv.isna().all()
    assert len(after) > 0 and after.t_recv.notna().all()
    faults = pq.read_table(tmp_path / "faults").to_pandas()
    assert list(faults.kind) == ["partition", "heal"]
    assert json.loads(faults.detail[0]) == {"sizes": [5, 5]}


def test_recover_starts_fresh_incarnation_and_drops_old_timers():
    extra = (
        '[[faults]]\nat = 3.2\nkind = "crash"\nnodes = [4]\n'
        '[[faults]]\nat = 6.5\nkind = "recover"\nnodes = [4]\n'
    )
    sim = Simulation(scenario(pubs=0, extra=extra))
    sim.run()
    node = sim.nodes[4]
    assert sim.incarnation[4] == 1
    # the new incarnation's ping timer runs from its own start (6.5 + k), none from before
    assert node.timer_times and all(t >= 7.5 - 1e-9 for t in node.timer_times)
    assert all(
        math.isclose((t - 6.5) % 1.0, 0.0, abs_tol=1e-9)
        or math.isclose((t - 6.5) % 1.0, 1.0, abs_tol=1e-9)
        for t in node.timer_times
    )


def test_churn_joins_new_nodes_and_crashes_others(tmp_path: Path):
    extra = '[[faults]]\nat = 2.0\nkind = "churn"\nrate = 2.0\nuntil = 18.0\njoin_fraction = 0.5\n'
    s = scenario(pubs=0, extra=extra).with_overrides(["run.nodes=30", "stack.probe.ring_size=30"])
    run_scenario(s, tmp_path)
    nodes = pq.read_table(tmp_path / "nodes").to_pandas()
    joins = nodes[(nodes.event == "up") & (nodes.node >= 30)]
    crashes = nodes[nodes.event == "crash"]
    assert len(joins) > 5 and len(crashes) > 5
    assert (joins.t > 2.0).all() and (crashes.t <= 18.0).all()


def test_timer_jitter_stays_within_its_fraction():
    s = scenario(pubs=0).with_overrides(["network.timer_jitter=0.2"])
    sim = Simulation(s)
    sim.run()
    gaps = [
        b - a for a, b in zip(sim.nodes[0].timer_times, sim.nodes[0].timer_times[1:], strict=False)
    ]
    assert gaps and all(0.8 - 1e-9 <= g <= 1.2 + 1e-9 for g in gaps)
    assert len({round(g, 6) for g in gaps}) > 3  # jittered, not constant


def test_zipf_popularity_favours_low_ranks():
    s = scenario(pubs=0).with_overrides(
        [
            "run.nodes=400",
            "stack.probe.ring_size=400",
            "workload.topics=10",
            'workload.topic_popularity="zipf"',
            "workload.zipf_s=1.2",
            "run.duration=1.0",
        ]
    )
    sim = Simulation(s)
    sim.run()
    counts = {t: len(sim.topic_subscribers.get(t, ())) for t in (f"t{i}" for i in range(10))}
    assert counts["t0"] > counts["t3"] > counts["t9"]


def test_snapshots_and_legitimacy_checks_are_written(tmp_path: Path):
    s = scenario().with_overrides(["trace.snapshot_interval=5.0"])
    run_scenario(s, tmp_path)
    snaps = pq.read_table(tmp_path / "snapshots").to_pandas()
    assert sorted(snaps.t.unique()) == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert len(snaps) == 5 * 10
    checks = pq.read_table(tmp_path / "checks").to_pandas()
    # probe's predicate: every node has seen a publication (first one at t=2)
    assert list(checks.value) == [False, True, True, True, True]


def test_counts_mode_adds_up_to_the_full_trace(tmp_path: Path):
    full, counts = tmp_path / "full", tmp_path / "counts"
    run_scenario(scenario(loss=0.1), full)
    run_scenario(scenario(loss=0.1).with_overrides(['trace.messages="counts"']), counts)
    msgs = pq.read_table(full / "messages").to_pandas()
    agg = pq.read_table(counts / "message_counts").to_pandas()
    assert agg.sent.sum() == len(msgs)
    assert agg.received.sum() == msgs.t_recv.notna().sum()
    assert agg.lost.sum() == msgs.t_recv.isna().sum()
    assert agg.bytes_sent.sum() == msgs.bytes.sum()
    assert not (counts / "messages").exists()


def test_run_json_and_publication_rows(tmp_path: Path):
    result = run_scenario(scenario(pubs=6), tmp_path)
    stats = json.loads((tmp_path / "run.json").read_text())
    assert stats["events_processed"] > 0 and stats["wall_seconds"] >= 0
    assert stats["peak_memory_bytes"] > 10 * 2**20
    assert stats["run_id"] == result.run_id
    pubs = pq.read_table(tmp_path / "publications").to_pandas()
    assert list(pubs.pub_id) == list(range(6))
    assert list(pubs.t) == [2.0 + i / 2.0 for i in range(6)]
    assert (pubs["size"] == 100).all()
    runs = pq.read_table(tmp_path / "runs").to_pylist()
    assert runs[0]["schema_version"] == 1 and runs[0]["runtime"] == "sim"
    # the stored scenario text reproduces the run
    again = parse_scenario(runs[0]["scenario"])
    assert again.text == runs[0]["scenario"]


def test_commands_and_injection_api():
    sim = Simulation(scenario(pubs=0))
    sim.run(until=1.0)
    sim.command(5, Subscribe("x"))
    sim.command(5, Publish("x", 99, b"hi"))
    sim.run(until=2.0)
    assert (99, 5, 1.0, 0) in sim.deliveries
    assert sim.run_until(lambda s: s.now >= 3.0, limit=10.0)


def test_same_seed_same_bytes_different_seed_different_bytes(tmp_path: Path):
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        run_scenario(scenario(seed=seed, loss=0.05), tmp_path / name)
    for table in ("messages", "deliveries", "nodes", "publications", "subscriptions"):
        a = (tmp_path / "a" / table / "part-00000.parquet").read_bytes()
        b = (tmp_path / "b" / table / "part-00000.parquet").read_bytes()
        assert a == b, table
    a = (tmp_path / "a" / "messages" / "part-00000.parquet").read_bytes()
    c = (tmp_path / "c" / "messages" / "part-00000.parquet").read_bytes()
    assert a != c
