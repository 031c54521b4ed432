"""brokertree's per-publisher high-water marks survive a durable restart.

A brokertree client drops every copy at or below the last it delivered from that publisher
(spec §6.5's safety net); that is what keeps ``past_stall = "forward"`` exactly-once and in
each publisher's order. A client restarted on its data directory must therefore come back with
its marks (``StackNode.durable`` / ``restore``, kept by ``pubmesh node --data-dir`` and by the
simulator's ``recover`` with ``durable = true``): here a fifth of the clients crash while
publications flow and come back durably, and each comes back with exactly the marks it had,
then delivers nothing twice and nothing out of its publishers' order.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pubmesh.durable import retained_now
from pubmesh.proto.brokertree.node import BrokerTreeNode
from pubmesh.proto.history import Retained
from pubmesh.scenario.model import parse_scenario
from pubmesh.sim.engine import Simulation

SEED = 2
CRASH_AT, RECOVER_AT = 16.0, 18.0
SCENARIO = f"""
[run]
stack = "brokertree"
nodes = 40
seed = {SEED}
duration = 32.0
start_spread = 1.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
detection_delay = 1.0
[workload]
topics = 4
subscriptions_per_node = 2
publications = 300
publish_start = 10.0
publish_rate = 20.0
publisher = "any"
[trace]
messages = "counts"
snapshot_interval = 0.0
[stack.brokertree]
brokers = 12
delta = 2
topology_seed = {SEED}
past_stall = "forward"
[[faults]]
at = {CRASH_AT}
kind = "crash"
fraction = 0.2
role = "peer"
[[faults]]
at = {RECOVER_AT}
kind = "recover"
fraction = 1.0
durable = true
"""
REPLAY = f"seed {SEED}; replay: pubmesh sim FILE (the scenario in {__file__})"


def test_a_durable_client_comes_back_with_its_marks_and_keeps_order(tmp_path: Path) -> None:
    sim = Simulation(parse_scenario(SCENARIO), tmp_path / "run")
    sim.run(until=CRASH_AT - 0.001)
    before: dict[int, dict[int, Any]] = {
        n: dict(node.s.last)
        for n, node in sim.nodes.items()
        if isinstance(node, BrokerTreeNode) and node.s.last
    }
    # and what each retains of its own publications for late subscribers, with their numbers
    retained = {n: retained_now(node) for n, node in sim.nodes.items()}
    seqs = {
        n: {t: dict(s) for t, s in node.history.seqs.items()}
        for n, node in sim.nodes.items()
        if isinstance(node, BrokerTreeNode)
    }
    sim.run(until=RECOVER_AT + 0.0001)  # the recover has run, nothing delivered since
    recovered = sorted(n for n in before if n in sim.nodes and n not in sim.crashed)
    crashed = [n for n in before if sim.incarnation.get(n, 0) > 0]
    assert crashed, f"no client with marks crashed and came back; {REPLAY}"
    for n in crashed:
        node = sim.nodes[n]
        assert isinstance(node, BrokerTreeNode)
        assert node.s.last == before[n], f"client {n} came back without its marks; {REPLAY}"
        assert retained_now(node) == retained[n], f"client {n} lost its history; {REPLAY}"
        for topic, item in retained[n]:  # each with the sequence number it was issued with
            assert node.history.seqs[topic][item.pub_id] == seqs[n][topic][item.pub_id], REPLAY
    assert sum(len(retained[n]) for n in crashed) >= 10, f"a case with little to lose; {REPLAY}"
    assert recovered
    sim.run()
    sim.close()

    publications = {
        r["pub_id"]: r for r in pq.read_table(tmp_path / "run" / "publications").to_pylist()
    }
    deliveries = sorted(
        pq.read_table(tmp_path / "run" / "deliveries").to_pylist(), key=lambda r: r["t"]
    )
    seen: set[tuple[int, int]] = set()
    last: dict[tuple[int, int], tuple[float, int]] = defaultdict(lambda: (-1.0, -1))
    for d in deliveries:
        pair = (d["pub_id"], d["node"])
        assert pair not in seen, f"publication {pair[0]} delivered twice at {pair[1]}; {REPLAY}"
        seen.add(pair)
        p = publications[d["pub_id"]]
        key, order = (d["node"], p["publisher"]), (p["t"], p["pub_id"])
        assert order > last[key], f"node {d['node']}: publisher {key[1]} out of order; {REPLAY}"
        last[key] = order


def test_a_planted_mark_is_refused() -> None:
    from pubmesh.proto.core import NodeContext, node_random
    from pubmesh.stacks.base import get_stack

    spec = get_stack("brokertree")
    params = parse_scenario(SCENARIO).stack_params
    node = spec.create(NodeContext(node_id=30, rng=node_random(1, 30), role="peer", params=params))
    node.restore({"last": [[5, 12.5, 3]]})
    assert node.durable() == {"last": [[5, 12.5, 3]]}
    for bad in ({"last": "x"}, {"last": [[5, "a", 3]]}, {"last": [[5, 1.0]]},
                {"last": [[5, float("nan"), 1]]}, {"last": [[True, 1.0, 1]]}):  # fmt: skip
        with pytest.raises(ValueError):
            node.restore(bad)
    # a retained publication comes back with its sequence number, or not at all
    node.restore_retained("t0", Retained(7, b"p", 1.0, {"k": 1}, [2.5, 4]))
    assert retained_now(node) == [("t0", Retained(7, b"p", 1.0, {"k": 1}, [2.5, 4]))]
    for item in (Retained(8, b"p", 1.0), Retained(8, b"p", 1.0, None, [1.0, "k"]),
                 Retained(8, "text", 1.0, None, [1.0, 1]),  # type: ignore[arg-type]
                 Retained(8, b"p", math.nan, None, [1.0, 1]),
                 Retained(8, b"p", 1.0, {3: 1}, [1.0, 1])):  # fmt: skip
        with pytest.raises(ValueError):
            node.restore_retained("t0", item)
    assert len(retained_now(node)) == 1
