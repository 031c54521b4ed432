"""The shapes of Kazemzadeh & Jacobsen's Figs. 14-17 as assertions (docs/protocols/brokertree.md §11
(d)-(g)).

The paper's figures are measurements of a deployment; the spec turns each into a shape with a
tolerance, measured here on simulated runs:

* (d) Fig. 16: control messages (everything but publications and heartbeats) per second
  against the publication rate, 10 … 400/s: per-message confirmations grow with the rate,
  depth acks stay flat below two per session per dack period, and the gap widens.
* (e) Fig. 14: the chain3 layout (three core brokers with nine edge nodes each); core 0
  crashes at 40 s, core 1 at 80 s. From 20 s after each bypass, the next core's incoming
  publications are within ±10% of before (a node only receives what its subtree subscribes
  to), its outgoing ones above (more copies, one per bypassed neighbour's neighbour).
* (f) Fig. 15: one publisher and one subscriber at the ends of a chain of 12 brokers; k = 1,
  2, 3 adjacent brokers between them crash at 50 s and restart at 150 s, with the runtime's
  failure notice (T_d = detection_delay = 1 s) as the only detector: the latency peak grows
  by T_d ± 25% per crashed broker (each bypass step waits for one notice), and the restart
  bump is small and about the same for every k.
* (g) Fig. 17: the time from a restart to ``brokertree.recovered`` is about the same at every
  publication rate (the transfer is the table, not the traffic).
"""

from __future__ import annotations

import itertools
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pubmesh.proto.brokertree.view import View
from pubmesh.proto.core import Publish, Subscribe
from pubmesh.scenario.model import load_scenario, parse_scenario
from pubmesh.sim.engine import Simulation
from support.btfigures import adjacent_brokers, view_of
from support.figures import replay
from support.tiers import full, tiered

ROOT = Path(__file__).resolve().parents[3]
BASE = "scenarios/brokertree_base.toml"


# ------------------------------------------------------------------------------ (d) Fig. 16
def _control_per_second(tmp_path: Path, ack: str, rate: int) -> tuple[float, int]:
    sets = (
        "run.nodes=30",
        "stack.brokertree.brokers=10",
        "workload.subscriptions_per_node=10",
        "workload.publish_start=10",
        f"workload.publications={rate * 5}",
        f"workload.publish_rate={rate}",
        "run.duration=17",
        "faults.0.at=1000",
        'trace.messages="full"',
        f'stack.brokertree.ack="{ack}"',
    )
    scenario = load_scenario(ROOT / BASE, list(sets))
    out = tmp_path / f"{ack}-{rate}"
    sim = Simulation(scenario, out)
    sim.run()
    sim.close()
    rows = pq.read_table(out / "messages", columns=["t_send", "type"]).to_pylist()
    counts = Counter(r["type"] for r in rows if 10 <= r["t_send"] < 15)
    control = sum(n for kind, n in counts.items() if kind not in ("Pub", "Heartbeat"))
    sessions = sum(len(node.s.sessions.open_peers()) for node in sim.nodes.values()) // 2
    return control / 5, sessions


def test_depth_acks_stay_flat_while_confirmations_grow_with_the_rate(tmp_path: Path) -> None:
    rates = [10, 50, 100, 200, 400]
    conf = [_control_per_second(tmp_path, "conf", r)[0] for r in rates]
    dack_runs = [_control_per_second(tmp_path, "dack", r) for r in rates]
    dack = [c for c, _ in dack_runs]
    hint = f"rates {rates}: conf {conf}, dack {dack}; {replay(BASE, 1)} (see the test's sets)"
    assert all(b > a for a, b in itertools.pairwise(conf)), hint
    assert conf[-1] / conf[1] > 4, hint  # ×8 the rate: at least half of linear
    for value, (_, sessions) in zip(dack, dack_runs, strict=True):
        assert value <= 2 * sessions / 1.0, (value, sessions, hint)  # dack_period 1 s
    assert max(dack[1:]) < 1.5 * min(dack[1:]), hint  # flat from 50/s on
    gaps = [c - d for c, d in zip(conf[1:], dack[1:], strict=True)]
    assert all(g > 0 for g in gaps), hint
    assert all(b > a for a, b in itertools.pairwise(gaps)), hint


# ------------------------------------------------------------------------------ (e) Fig. 14
CHAIN3 = """
[run]
stack = "brokertree"
nodes = 86
seed = {seed}
duration = 125.0
start_spread = 1.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
detection_delay = 1.0
[workload]
topics = 10
subscriptions_per_node = 4
publications = 2000
publish_start = 20.0
publish_rate = 20.0
publisher = "any"
[[faults]]
at = 40.0
kind = "crash"
nodes = [0]
[[faults]]
at = 80.0
kind = "crash"
nodes = [1]
[trace]
messages = "counts"
[stack.brokertree]
brokers = 20
delta = 3
layout = "chain3"
core_fanout = 9
topology_seed = {seed}
"""


@pytest.mark.parametrize("seed", tiered([1], [2]))
def test_after_a_bypass_input_stays_and_output_grows(seed: int, tmp_path: Path) -> None:
    out = tmp_path / "run"
    sim = Simulation(parse_scenario(CHAIN3.format(seed=seed)), out)
    sim.run()
    sim.close()
    rows = pq.read_table(out / "message_counts").to_pylist()

    def rate(node: int, lo: int, hi: int, field: str) -> float:
        total = sum(
            r[field] for r in rows if r["node"] == node and r["payload"] and lo <= r["second"] < hi
        )
        return total / (hi - lo)

    hint = (
        f"seed {seed}; replay: pytest tests/proto/brokertree/test_brokertree_shapes.py"
        f" -k 'bypass and {seed}'"
    )
    # core 1 bypasses core 0 (crashed at 40 s), core 2 bypasses cores 0 and 1 (80 s)
    for node, before, after in ((1, (25, 40), (60, 80)), (2, (60, 80), (100, 120))):
        received = rate(node, *before, "received"), rate(node, *after, "received")
        sent = rate(node, *before, "sent"), rate(node, *after, "sent")
        assert received[0] > 5, (node, received, hint)
        assert abs(received[1] / received[0] - 1) <= 0.10, (node, received, hint)
        assert sent[1] > sent[0], (node, sent, hint)


# ------------------------------------------------------------------------------ (f) Fig. 15
LINE = """
[run]
stack = "brokertree"
nodes = 60
seed = 1
duration = 190.0
start_spread = 0.0
[network]
latency = { dist = "uniform", min = 0.005, max = 0.050 }
detection_delay = 1.0
[workload]
topics = 1
subscriptions_per_node = 0
publications = 0
[trace]
messages = "counts"
[stack.brokertree]
brokers = 12
delta = 3
max_degree = 2
hb = false
"""


def _delay_peaks(k: int) -> tuple[float, float, float, int]:
    """(peak latency after the crash, peak after the restart, median before, undelivered)."""
    scenario = parse_scenario(LINE)
    ends = [b for b in range(12) if len(View(scenario.stack_params, tuple(range(12)), b)
                                         .broker_neighbours(b)) == 1]  # fmt: skip
    view = View(scenario.stack_params, tuple(range(12)), ends[0])
    chain = [ends[0], *view.path(ends[1])]
    assert len(chain) == 12, chain  # max_degree 2: the brokers form one line
    publisher = next(c for c in range(12, 60) if view.attach(c) == chain[0])
    subscriber = next(c for c in range(12, 60) if view.attach(c) == chain[-1])
    victims = chain[6 - k // 2 : 6 - k // 2 + k]
    sim = Simulation(scenario, None)
    sim.at(1.0, sim.command, subscriber, Subscribe("t"))
    issued = {}
    for i in range(170 * 20):
        issued[i] = 10.0 + i / 20
        sim.at(issued[i], sim.command, publisher, Publish("t", i, b""))
    sim.at(50.0, sim.crash, victims)
    sim.at(150.0, sim.recover, victims)
    sim.run()
    latency = {p: t - issued[p] for p, node, t, _ in sim.deliveries if node == subscriber}
    before = sorted(v for p, v in latency.items() if issued[p] < 49)
    peak = max(v for p, v in latency.items() if 49 < issued[p] < 140)
    bump = max(v for p, v in latency.items() if 145 < issued[p] < 170)
    lost = sum(1 for p in issued if issued[p] < 179 and p not in latency)
    return peak, bump, before[len(before) // 2], lost


def test_the_delay_peak_grows_by_one_detection_time_per_crashed_broker() -> None:
    runs = {k: _delay_peaks(k) for k in (1, 2, 3)}
    hint = f"(peak, restart bump, median before, lost) by k: {runs}"
    for _peak, bump, median, lost in runs.values():
        assert lost == 0, hint  # k ≤ δ: nothing is lost, only delayed
        assert median < 0.6 and bump < median + 0.5, hint
    t_d = 1.0
    for k in (2, 3):
        step = runs[k][0] - runs[k - 1][0]
        assert abs(step - t_d) <= 0.25 * t_d, (k, step, hint)
    bumps = [runs[k][1] for k in (1, 2, 3)]
    assert max(bumps) - min(bumps) < 0.25, hint


# ------------------------------------------------------------------------------ (g) Fig. 17
#: make test: rates 10 and 100/s (a tenfold span) with 10 subscriptions per client; make
#: figures: 10, 50 and 100/s with the scenario's 40
RECOVERY_CASES = [
    pytest.param((10, 100), 10, id="small"),
    pytest.param((10, 50, 100), 40, marks=full, id="full"),
]


@pytest.mark.parametrize(("rates", "per_client"), RECOVERY_CASES)
def test_the_time_to_recover_is_about_the_same_at_every_rate(
    rates: tuple[int, ...], per_client: int, tmp_path: Path
) -> None:
    """Fig. 17: 3 adjacent brokers restart together; the time from the restart to each one's
    ``recovered`` is within a probe period and flat across publication rates. In make test
    two rates a factor of ten apart and a table a quarter the size (10 subscriptions per
    client): the claim is that the transfer is the table, not the traffic, which the tenfold
    span of rates tests as well as three rates do."""
    base = load_scenario(ROOT / "scenarios/brokertree_recover.toml")
    victims = adjacent_brokers(view_of(base), 3)
    nodes = "[" + ",".join(map(str, victims)) + "]"
    times = {}
    for rate in rates:
        sets = [
            f"faults.0.nodes={nodes}",
            f"faults.1.nodes={nodes}",
            f"workload.publish_rate={rate}",
            "workload.publish_start=45",
            f"workload.publications={rate * 20}",
            f"workload.subscriptions_per_node={per_client}",
            "run.duration=68",
        ]
        out = tmp_path / f"r{rate}"
        sim = Simulation(load_scenario(ROOT / "scenarios/brokertree_recover.toml", sets), out)
        sim.run()
        sim.close()
        restart = base.faults[1].at
        events = pq.read_table(out / "events").to_pylist()
        times[rate] = sorted(
            e["t"] - restart
            for e in events
            if e["kind"] == "brokertree.recovered" and e["node"] in victims and e["t"] >= restart
        )
        shutil.rmtree(out)
    hint = f"recovery times after the restart by rate: {times}"
    assert all(len(t) == 3 for t in times.values()), hint
    longest = [max(t) for t in times.values()]
    assert max(longest) < 2.0, hint  # within a probe period of the restart
    assert max(longest) - min(longest) < 0.5, hint  # flat across rates
