"""Topic history for late subscribers in the simulator.

A share of the workload nodes (``[workload] late_fraction``) subscribes at ``late_at``, long
after the publications began, asking for the topic's history. On gossip the history comes from
the swarm's members (pubmesh.proto.history): each late subscriber must end with every
publication of its topic that the members hold, each delivered once (the replayed copies and
the live copies in flight when it joined are one delivery), and the run says how many were
replayed (``history.replayed`` events). The publications go on across ``late_at``, so live and
replayed copies of the same publications meet.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pubmesh.errors import ScenarioError
from pubmesh.proto.core import HistoryRequest
from pubmesh.proto.history import parse_history
from pubmesh.scenario.model import parse_scenario
from pubmesh.scenario.workload import plan
from pubmesh.sim.runner import run_scenario
from support.history import check_publish_times

SEED = 4
LATE_AT = 20.0
SCENARIO = f"""
[run]
stack = "gossip"
nodes = 50
seed = {SEED}
duration = 35.0
start_spread = 1.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 2
subscriptions_per_node = 1
publications = 200
publish_start = 8.0
publish_rate = 10.0
late_fraction = 0.2
late_at = {LATE_AT}
history = "all"
"""


def _rows(run_dir: Path, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(run_dir / table).to_pylist()
    return rows


def test_history_requests_read_as_the_shell_writes_them() -> None:
    assert parse_history("all") == HistoryRequest()
    assert parse_history("50") == parse_history(50) == HistoryRequest(count=50)
    assert parse_history("90s") == HistoryRequest(seconds=90.0)
    assert parse_history("5m") == HistoryRequest(seconds=300.0)
    assert parse_history("500ms") == HistoryRequest(seconds=0.5)
    assert str(HistoryRequest(seconds=90.0)) == "90s" and str(HistoryRequest()) == "all"
    for bad in ("", "-3", "0", 0, "ten", "5 days", True, 1.5, None):
        with pytest.raises(ValueError, match="history"):
            parse_history(bad)


def test_late_subscribers_are_planned_at_late_at_with_their_request() -> None:
    scenario = parse_scenario(SCENARIO)
    workload_plan = plan(scenario)
    late = [s for s in workload_plan.subscriptions if s.history is not None]
    on_time = [s for s in workload_plan.subscriptions if s.history is None]
    assert len({s.node for s in late}) == round(0.2 * 50) == len(late)
    assert {s.t for s in late} == {LATE_AT} and {s.history for s in late} == {HistoryRequest()}
    assert all(s.t < LATE_AT for s in on_time) and len(on_time) == 40
    # the same seed draws the same late nodes
    assert [s.node for s in late] == [
        s.node for s in plan(scenario).subscriptions if s.history is not None
    ]


def test_a_stack_without_history_refuses_a_late_request() -> None:
    # every stack of pubmesh keeps a history: the tests' own tiny stack (tests/tinystack) does not
    text = SCENARIO.replace('stack = "gossip"', 'stack = "tiny"')
    with pytest.raises(ScenarioError, match=r"\[workload\] history.*keeps no topic history"):
        parse_scenario(text)
    with pytest.raises(ScenarioError, match=r"\[workload\] history"):
        parse_scenario(SCENARIO.replace('history = "all"', 'history = "soon"'))
    # late subscribers without history are a plain workload on any stack
    parse_scenario(text.replace('history = "all"', 'history = ""'))


def test_late_subscribers_get_the_swarms_history_once(tmp_path: Path) -> None:
    replay = f"seed {SEED}; replay: pubmesh sim FILE (the scenario in {__file__})"
    run_dir = tmp_path / "run"
    run_scenario(parse_scenario(SCENARIO), run_dir)
    subscriptions = _rows(run_dir, "subscriptions")
    publications = _rows(run_dir, "publications")
    deliveries = _rows(run_dir, "deliveries")
    events = [e for e in _rows(run_dir, "events") if e["kind"] == "history.replayed"]

    copies = Counter((d["pub_id"], d["node"]) for d in deliveries)
    assert max(copies.values()) == 1, f"a publication delivered twice at a node; {replay}"
    got: dict[int, set[int]] = defaultdict(set)
    for d in deliveries:
        got[d["node"]].add(d["pub_id"])
    by_topic: dict[str, set[int]] = defaultdict(set)
    for p in publications:
        by_topic[p["topic"]].add(p["pub_id"])
    late = [s for s in subscriptions if s["t_start"] >= LATE_AT]
    on_time = [s for s in subscriptions if s["t_start"] < LATE_AT]
    assert len(late) == 10, replay
    for s in on_time:  # the live system delivers everything: the members hold it all
        assert got[s["node"]] >= by_topic[s["topic"]], f"node {s['node']} missed some; {replay}"
    before = {p["pub_id"] for p in publications if p["t"] < LATE_AT}
    replayed: dict[int, set[int]] = defaultdict(set)
    for e in events:
        replayed[e["node"]].add(json.loads(e["detail"])["pub_id"])
    for s in late:
        node, wanted = s["node"], by_topic[s["topic"]]
        missing = sorted(wanted - got[node])
        assert not missing, f"late node {node} lacks {missing[:10]}; {replay}"
        # what was issued before it subscribed came from the history, and only that
        assert replayed[node] >= wanted & before, f"node {node}: not replayed; {replay}"
        assert replayed[node] <= wanted, replay
    assert set(replayed) == {s["node"] for s in late}, "only late subscribers replay"
    # each replayed copy carries its publish time: a member's first copy of it, a hop or a
    # few after the publication (latency ≤ 50 ms a hop), and the answer's transit
    check_publish_times(run_dir, replay, within=0.5)


def test_the_same_seed_gives_the_same_history_byte_for_byte(tmp_path: Path) -> None:
    small = SCENARIO.replace("nodes = 50", "nodes = 20").replace(
        "publications = 200", "publications = 60"
    )
    for name in ("a", "b"):
        run_scenario(parse_scenario(small), tmp_path / name)
    for table in ("deliveries", "events", "messages"):
        first = (tmp_path / "a" / table / "part-00000.parquet").read_bytes()
        assert first == (tmp_path / "b" / table / "part-00000.parquet").read_bytes(), table


def test_a_retention_keeps_the_newest_within_its_bounds() -> None:
    from pubmesh.proto.history import Retention

    kept = Retention(count=3, seconds=10.0, max_bytes=25)
    for i in range(5):
        kept.add(i, b"x" * 10, float(i))
    kept.add(4, b"y" * 10, 4.5)  # one entry per id
    # bytes (25) leave two of the three the count allows
    assert [r.pub_id for r in kept.select(0, 0.0, 5.0)] == [3, 4]
    assert [r.pub_id for r in kept.select(1, 0.0, 5.0)] == [4]
    assert [r.pub_id for r in kept.select(0, 1.5, 5.0)] == [4]
    assert kept.select(0, 0.0, 14.5) == [] and kept.bytes == 0  # older than 10 s
    none = Retention(count=0, seconds=10.0, max_bytes=25)
    none.add(1, b"x", 0.0)
    assert none.select(0, 0.0, 0.0) == []


def test_skiprings_late_subscribers_get_every_publication_by_its_own_repair(
    tmp_path: Path,
) -> None:
    """skipring keeps no separate history: its trie repair hands a subscriber every
    publication ever issued on its topic (Feldmann et al. §4), late or not, once each."""
    text = (
        SCENARIO.replace('stack = "gossip"', 'stack = "skipring"')
        .replace("nodes = 50", "nodes = 25")
        .replace("publications = 200", "publications = 80")
    )
    replay = f"seed {SEED}; replay: pubmesh sim FILE (the skipring scenario in {__file__})"
    run_dir = tmp_path / "run"
    run_scenario(parse_scenario(text), run_dir)
    subscriptions = _rows(run_dir, "subscriptions")
    deliveries = _rows(run_dir, "deliveries")
    copies = Counter((d["pub_id"], d["node"]) for d in deliveries)
    assert max(copies.values()) == 1, f"a publication delivered twice; {replay}"
    by_topic: dict[str, set[int]] = defaultdict(set)
    for p in _rows(run_dir, "publications"):
        by_topic[p["topic"]].add(p["pub_id"])
    late = [s for s in subscriptions if s["t_start"] >= LATE_AT]
    assert len(late) == 5, replay
    for s in late:
        got = {pub for pub, node in copies if node == s["node"]}
        missing = sorted(by_topic[s["topic"]] - got)
        assert not missing, f"late node {s['node']} lacks {missing[:10]}; {replay}"
