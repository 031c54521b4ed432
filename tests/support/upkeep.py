"""The steady gossip overlay whose upkeep is measured: shared by the cheap test
(``tests/proto/gossip/test_gossip_upkeep.py``, 300 nodes) and the benchmark
(``bench/bench_upkeep.py``, 20,000 and 100,000 nodes).

A warm overlay (``[init] overlay = "warm"``), one topic, every node subscribed, one
publication at 10 s, ``DURATION`` simulated seconds, message totals only: nothing needs
repair, so every message but the one broadcast is upkeep."""

from __future__ import annotations

DURATION = 30.0
SEED = 1000003


def upkeep_scenario(nodes: int) -> str:
    """The scenario's TOML text for an overlay of ``nodes``."""
    return f"""
[run]
stack = "gossip"
nodes = {nodes}
seed = {SEED}
duration = {DURATION}
start_spread = 0.0
[init]
overlay = "warm"
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 1
subscriptions_per_node = 1
publications = 1
publish_start = 10.0
publisher = "subscriber"
[trace]
messages = "counts"
"""
