"""The simulator's own features, on the tiny probe stack (tests/support/probestacks.py), where the
expected outcome can be worked out by hand."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import support.probestacks  # noqa: F401  (registers the probe stack)
from pubmesh.proto.core import Publish, Subscribe
from pubmesh.scenario.model import parse_scenario
from pubmesh.scenario.workload import Publication
from pubmesh.sim.engine import Simulation
from pubmesh.sim.runner import run_scenario

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


def link_reorderings(msgs) -> tuple[int, int]:
    """(pairs, reordered): over every (src, dst) link, the pairs of messages received one
    after the other, and how many of them were received in the opposite order to the one they
    were sent in. The trace is in receive order (the simulator writes each message when it
    pops its arrival off the heap), which the caller checks."""
    pairs = reordered = 0
    for _link, group in msgs.groupby(["src", "dst"], sort=True):
        sent = list(group.t_send)  # groupby keeps the rows' (receive) order within a group
        pairs += len(sent) - 1
        reordered += sum(1 for a, b in itertools.pairwise(sent) if b < a)
    return pairs, reordered


def read_messages(run_dir: Path):
    msgs = pq.read_table(run_dir / "messages").to_pandas()
    received = msgs.dropna(subset=["t_recv"])
    # receive order: the rows come out in the order the loop processed the arrivals
    assert received.t_recv.is_monotonic_increasing
    return received


def test_constant_latency_is_fifo_and_exact(tmp_path: Path):
    sim = Simulation(scenario(latency='{ dist = "constant", value = 0.25 }'), tmp_path)
    sim.run()
    sim.close()
    # exact: every delivery happens 0.25 s per hop after its publication
    published = {
        row["pub_id"]: row["t"] for row in pq.read_table(tmp_path / "publications").to_pylist()
    }
    assert published == {i: 2.0 + i / 2.0 for i in range(4)}
    assert len(sim.deliveries) == 4 * 10  # every node delivers every publication
    hops_by_pub: dict[int, list[int]] = {}
    for pub_id, _node, t, hops in sim.deliveries:
        hops_by_pub.setdefault(pub_id, []).append(hops)
        assert math.isclose(t, published[pub_id] + 0.25 * hops, abs_tol=1e-9), (pub_id, t, hops)
    assert {p: sorted(h) for p, h in hops_by_pub.items()} == {p: list(range(10)) for p in range(4)}
    # FIFO: on every link, messages arrive in the order they were sent
    msgs = read_messages(tmp_path)
    # 10 nodes ping at 1, 2, ..., 20 s and forward each of 4 floods once: 240 sends, of
    # which the 10 pings sent at 20.0 arrive after the end of the run
    assert sim.messages_sent == 10 * 20 + 4 * 10 and len(msgs) == 10 * 19 + 4 * 10
    assert ((msgs.t_recv - msgs.t_send) - 0.25).abs().max() < 1e-9
    links = set(zip(msgs.src, msgs.dst, strict=True))
    assert links == {(n, (n + 1) % 10) for n in range(10)}  # the probe's ring
    pairs, reordered = link_reorderings(msgs)
    assert pairs >= 10 * 19  # each link carries a ping a second for 20 s, plus the floods
    assert reordered == 0


def test_lognormal_latency_reorders_messages(tmp_path: Path):
    # Per-message latency: messages on the same link overtake each other (non-FIFO).
    s = scenario(latency='{ dist = "lognormal", median = 0.05, sigma = 1.0 }', pubs=0)
    s = s.with_overrides(["stack.probe.ping_interval=0.02", "run.duration=5.0"])
    run_scenario(s, tmp_path)
    msgs = read_messages(tmp_path)
    pings = msgs[msgs.type == "ProbePing"]
    assert set(zip(pings.src, pings.dst, strict=True)) == {(n, (n + 1) % 10) for n in range(10)}
    pairs, reordered = link_reorderings(pings)
    assert pairs >= 10 * 200  # 50 pings a second on each link for about 5 s
    # with sigma = 1 and pings 0.02 s apart (under half the median), overtaking is common
    assert reordered > pairs // 20, (reordered, pairs)


def test_uniform_latency_within_bounds(tmp_path: Path):
    run_scenario(scenario(latency='{ dist = "uniform", min = 0.1, max = 0.2 }'), tmp_path)
    msgs = pq.read_table(tmp_path / "messages").to_pandas().dropna(subset=["t_recv"])
    assert len(msgs) >= 10 * 19  # a ping a second per node for 20 s, plus the floods
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
    assert sorted(sim.nodes) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
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
    assert len(gaps) >= 15  # about 20 s of a ping timer of 1 s ± 20 %
    assert all(0.8 - 1e-9 <= g <= 1.2 + 1e-9 for g in gaps)
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
    assert msgs.t_recv.isna().sum() > 0 and msgs.t_recv.notna().sum() > 0
    assert agg.sent.sum() == len(msgs)
    assert agg.received.sum() == msgs.t_recv.notna().sum()
    assert agg.lost.sum() == msgs.t_recv.isna().sum()
    assert agg.bytes_sent.sum() == msgs.bytes.sum()
    assert not (counts / "messages").exists()


def test_a_run_without_deliveries_has_no_last_delivery_time(tmp_path: Path):
    stats = run_scenario(scenario(pubs=0), tmp_path).stats
    assert stats["deliveries"] == 0 and stats["last_delivery_at"] is None


def test_a_stopped_run_ends_between_two_events_and_its_trace_says_how_far(tmp_path: Path):
    # the stop is asked before the run: the loop takes it at its first periodic check
    sim = Simulation(scenario(), tmp_path, progress_every=100)
    sim.request_stop("test")
    sim.run()
    assert sim.stopped == "test" and sim.events_processed == 100
    assert 0 < sim.now < sim.scenario.run.duration  # the last event's time, not the end's
    sim.close()
    runs = pq.read_table(tmp_path / "runs").to_pylist()
    assert runs[0]["duration"] == sim.now
    sent = pq.read_table(tmp_path / "messages").column("t_send").to_pylist()
    assert sent and max(sent) <= sim.now
    # a run that is not stopped ends at its end, as before
    whole = Simulation(scenario(), progress_every=100)
    whole.run()
    assert whole.stopped is None and whole.now == whole.scenario.run.duration > sim.now


def test_run_json_and_publication_rows(tmp_path: Path):
    result = run_scenario(scenario(pubs=6), tmp_path)
    stats = json.loads((tmp_path / "run.json").read_text())
    assert stats["events_processed"] > 0 and stats["wall_seconds"] >= 0
    assert stats["peak_memory_bytes"] > 10 * 2**20
    assert stats["run_id"] == result.run_id
    # the latest delivery's simulated time: the deliveries table's last row, inside the run
    deliveries = pq.read_table(tmp_path / "deliveries").to_pandas()
    assert len(deliveries) == stats["deliveries"] > 0
    assert stats["last_delivery_at"] == deliveries.t.max() < stats["simulated_seconds"]
    pubs = pq.read_table(tmp_path / "publications").to_pandas()
    assert list(pubs.pub_id) == list(range(6))
    assert list(pubs.t) == [2.0 + i / 2.0 for i in range(6)]
    assert (pubs["size"] == 100).all()
    runs = pq.read_table(tmp_path / "runs").to_pylist()
    assert runs[0]["schema_version"] == 1 and runs[0]["runtime"] == "sim"
    # the stored scenario text reproduces the run
    again = parse_scenario(runs[0]["scenario"])
    assert again.text == runs[0]["scenario"]


def commanded_simulation() -> Simulation:
    """The probe ring, with node 5 subscribing to x and publishing on it at 1.0, run to 2.0."""
    sim = Simulation(scenario(pubs=0))
    sim.run(until=1.0)
    assert sim.now == 1.0
    sim.command(5, Subscribe("x"))
    sim.command(5, Publish("x", 99, b"hi"))
    sim.run(until=2.0)
    assert sim.now == 2.0
    return sim


def test_commands_and_injection_api():
    # every event time of the run after 2.0, up to 10.0: a predicate is checked after every
    # event, so one that never holds sees them all
    twin = commanded_simulation()
    times: list[float] = []
    assert not twin.run_until(lambda s: times.append(s.now) or False, limit=10.0)
    assert len(times) >= 80 and times == sorted(times)  # ten pings a second, in time order
    first_at_3 = min(t for t in times if t >= 3.0)
    last_by_7_5 = max(t for t in times if t <= 7.5)
    assert first_at_3 < 3.5 and last_by_7_5 >= 7.0  # the ring pings every second

    sim = commanded_simulation()
    assert (99, 5, 1.0, 0) in sim.deliveries
    assert sim.run_until(lambda s: True, limit=10.0)  # holds already: no event runs
    assert sim.now == 2.0
    # run_until stops at the first event at or after 3.0, not at the limit
    assert sim.run_until(lambda s: s.now >= 3.0, limit=10.0)
    assert sim.now == first_at_3
    # a predicate that never holds: the run stops at the limit and returns False, sim.now the
    # time of the last event at or before the limit (the next one is after it)
    assert not sim.run_until(lambda s: False, limit=7.5)
    assert sim.now == last_by_7_5
    pending = sim.pending_events()
    assert pending and pending[0][0] > 7.5
    # and it resumes from there: the events after the limit were not lost
    assert not sim.run_until(lambda s: False, limit=10.0)
    assert sim.now == times[-1]


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


def test_the_collector_is_left_as_the_caller_had_it(tmp_path: Path) -> None:
    """The simulator turns garbage collection off while it plans, warm-starts, runs its event
    loop and closes: afterwards the collector is on (or off) and at its thresholds exactly as
    before (a warm-started gossip run takes every one of those steps)."""
    import gc

    text = (Path(__file__).parents[2] / "scenarios" / "gossip_1000.toml").read_text()
    text = text.replace("nodes = 1000", "nodes = 50") + '\n[init]\noverlay = "warm"\n'
    thresholds = gc.get_threshold()
    for enabled in (True, False):
        if not enabled:
            gc.disable()
        try:
            sim = Simulation(parse_scenario(text), tmp_path / str(enabled))
            sim.run()
            sim.close()
            assert gc.isenabled() is enabled
            assert gc.get_threshold() == thresholds
            assert gc.get_freeze_count() == 0
        finally:
            gc.enable()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_event_queue_runs_events_in_heap_order(seed: int) -> None:
    """The binned event queue (Simulation._queue) against heapq over (time, sequence): actions
    that schedule more actions at random delays (zero, inside the bin being run, across bins,
    into the past) run in the heap's order, with the run stopping at limits between."""
    import heapq
    import random

    rng = random.Random(seed)
    sim = Simulation(scenario(pubs=0, extra="[trace]\nsnapshot_interval = 0.0\n"))
    sim.run(until=0.5)
    ran: list[tuple[float, int]] = []
    reference: list[tuple[float, int, int]] = []
    labels = itertools.count()

    def schedule(t: float) -> None:
        label = next(labels)
        sim.at(t, action, label)
        heapq.heappush(reference, (t, sim._seq, label))

    def action(label: int) -> None:
        # a shadow heap fed the same pushes at the same moments pops the same action
        t, _seq, expected = heapq.heappop(reference)
        ran.append((sim.now, label))
        assert (sim.now, label) == (t, expected), f"seed {seed}"
        for _ in range(rng.choice((0, 1, 2, 2))):
            delay = rng.choice((0.0, 0.0002, -0.3, rng.uniform(0.0, 0.002), rng.uniform(0, 2)))
            if len(ran) + len(reference) < 3000:  # a bounded run
                schedule(max(0.0, sim.now + delay))

    for _ in range(40):
        schedule(0.5 + rng.uniform(0.0, 0.01))
    for limit in (0.6, 0.6005, 1.5, 4.0, 30.0):
        sim.run_until(lambda s: False, limit=limit)
    assert not reference and len(ran) >= 2990, f"seed {seed}"
    past = sum(1 for (a, _), (b, _) in itertools.pairwise(ran) if b < a)
    assert past > 10, f"seed {seed}: events scheduled into the past ran at their time"


def test_the_plan_runs_first_at_its_instant_and_in_its_order():
    """The plan is run from a cursor beside the queue (Simulation._run_planned), as if each
    of its events were queued with a negative sequence number: each at its time, before any
    queued event of the same instant (the cursor takes them in the plan's order). Actions
    scheduled at every plan time, and just before and after it, read the cursor: exactly the
    plan events at or before their instant have run. (The test reads the cursor rather than
    wrapping a method, so it runs against the compiled build too.)"""
    sim = Simulation(scenario(pubs=6))
    events = sim.plan.events
    seen: list[tuple[float, int]] = []
    times = sorted({event.t for event in events})
    for t in times:
        for at in (t, max(0.0, t - 1e-4), t + 1e-4):
            sim.at(at, lambda: seen.append((sim.now, sim._plan_index)))
    before = sim.events_processed
    sim.run()
    assert len(events) >= 20 and len(seen) == 3 * len(times)
    for now, ran in seen:
        due = sum(1 for event in events if event.t <= now)
        assert ran == due, f"at t={now}: {ran} plan events had run, not {due}"
    assert [t for t, _ran in seen] == sorted(t for t, _ran in seen)
    assert sim._plan_index == len(events)
    # each publication ran at its time: its publisher delivered it there, at hop 0
    published = {pub_id: t for pub_id, _node, t, hops in sim.deliveries if hops == 0}
    planned = {e.pub_id: e.t for e in events if isinstance(e, Publication)}
    assert published == planned and len(planned) == 6
    assert sim.events_processed - before >= len(events) + 3 * len(times)


@pytest.mark.parametrize(
    "name",
    [
        "paper004_fail50",
        "skipring_demo",
        "chord_demo",
        "brokertree_demo",
        "clique_demo",
        "d2g_demo",
    ],
)
def test_a_run_makes_no_cyclic_garbage(name: str) -> None:
    """The event loop runs without the garbage collector (Simulation._loop): that is only
    sound while the stacks' handlers leave no reference cycles behind, which only the
    collector could free. A whole run of each stack's scenario, after a first tenth of one
    (which may build classes and caches once), leaves none."""
    import gc

    text = (Path(__file__).resolve().parents[2] / "scenarios" / f"{name}.toml").read_text()
    warm = Simulation(parse_scenario(text, source=name))
    warm.run(until=warm.scenario.run.duration / 10)
    del warm
    sim = Simulation(parse_scenario(text, source=name))
    gc.collect()
    sim.run()
    garbage = gc.collect()
    assert garbage == 0, f"{name}: {garbage} objects in reference cycles after a run"
