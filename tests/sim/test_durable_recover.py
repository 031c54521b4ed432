"""A node recovered with its data directory delivers nothing twice across its lives:
the simulator's ``recover`` fault with ``durable = true`` brings a node back with what
``pubmesh node --data-dir`` keeps (pubmesh.durable, the same rule and window).

Skipring keeps a topic's history and hands it to a node that comes back, so a node recovered
fresh delivers again what it delivered before its crash: 200 copies in this scenario. Recovered
durably, it delivers none of them, every other delivery is the same, and the run says how many
copies it refused.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pubmesh.errors import ScenarioError
from pubmesh.scenario.model import parse_scenario
from pubmesh.sim.runner import run_scenario

SEED = 3
SCENARIO = f"""
[run]
stack = "skipring"
nodes = 40
seed = {SEED}
duration = 30.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 1
subscriptions_per_node = 1
publications = 100
publish_start = 5.0
publish_rate = 5.0
[[faults]]
at = 10.0
kind = "crash"
fraction = 0.2
[[faults]]
at = 10.2
kind = "recover"
fraction = 1.0
"""


def _run(text: str, out: Path) -> tuple[Counter[tuple[int, int]], dict[str, object]]:
    import pyarrow.parquet as pq

    result = run_scenario(parse_scenario(text), out)
    rows = pq.read_table(out / "deliveries").to_pylist()
    return Counter((r["pub_id"], r["node"]) for r in rows), json.loads(
        (result.run_dir / "run.json").read_text()
    )


def test_a_durable_recover_delivers_nothing_twice_across_lives(tmp_path: Path) -> None:
    replay = f"seed {SEED}; replay: pubmesh sim FILE (the scenario in {__file__})"
    fresh, fresh_info = _run(SCENARIO, tmp_path / "fresh")
    durable, info = _run(SCENARIO + "durable = true\n", tmp_path / "durable")
    twice = {pair: n - 1 for pair, n in fresh.items() if n > 1}
    assert sum(twice.values()) == 200, f"the fresh recover's duplicates changed; {replay}"
    assert "duplicates_across_lives" not in fresh_info
    assert not [pair for pair, n in durable.items() if n > 1], replay
    assert set(durable) == set(fresh), f"a durable recover lost or added deliveries; {replay}"
    assert info["duplicates_across_lives"] == 200, replay


def test_only_a_recover_can_be_durable() -> None:
    text = SCENARIO.replace('kind = "crash"', 'kind = "crash"\ndurable = true')
    with pytest.raises(ScenarioError, match="durable: only a recover fault"):
        parse_scenario(text)
