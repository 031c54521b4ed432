"""Topic history for late subscribers on the relay-model stacks, clique and d2g (see
docs/protocols/clique.md and d2g.md, "Topic history"; an addition to Scheideler's lecture).

The contact (node 0), a member of every group that every publication reaches, retains each
topic's publications; a late subscriber's Join asks it for them (``JoinWithHistory``) and it
answers through the relay that Join gave it. A share of the workload nodes (``[workload]
late_fraction``) subscribes at ``late_at``, while publications go on across it: each late
subscriber must end with every publication of its topic that an on-time subscriber delivers,
each once (a replayed copy and a live one are one delivery), the ones issued before it
subscribed replayed, and only late subscribers replay. A count request bounds what is
replayed. The last test plays an insider against the bounds, over the in-memory harness.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pubmesh.harness import PoolCluster
from pubmesh.proto.clique.messages import HistoryPub, JoinWithHistory
from pubmesh.proto.clique.node import CliqueNode
from pubmesh.proto.core import (
    Deliver,
    HistoryRequest,
    NodeId,
    Output,
    Publish,
    Receive,
    Subscribe,
    TraceRecord,
)
from pubmesh.proto.relay.messages import Ref
from pubmesh.scenario.model import parse_scenario
from pubmesh.sim.runner import run_scenario
from pubmesh.stacks.base import get_stack
from support.history import check_publish_times

STACKS = ("clique", "d2g")
SEED = 4
LATE_AT = 20.0
NODES = 25


def _scenario(stack: str, history: str) -> str:
    return f"""
[run]
stack = "{stack}"
nodes = {NODES}
seed = {SEED}
duration = 35.0
start_spread = 1.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 2
subscriptions_per_node = 1
publications = 150
publish_start = 8.0
publish_rate = 10.0
late_fraction = 0.2
late_at = {LATE_AT}
history = "{history}"
"""


def _replay(stack: str, history: str) -> str:
    return (
        f"stack {stack}, seed {SEED}, history {history!r}; replay: pubmesh sim FILE with "
        f"_scenario({stack!r}, {history!r}) of {__file__}"
    )


def _run(stack: str, history: str, run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    run_scenario(parse_scenario(_scenario(stack, history)), run_dir)
    tables = {}
    for table in ("subscriptions", "publications", "deliveries", "events"):
        tables[table] = pq.read_table(run_dir / table).to_pylist()
    return tables


def _replayed(events: list[dict[str, Any]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for e in events:
        if e["kind"] == "history.replayed":
            out[e["node"]].append(json.loads(e["detail"])["pub_id"])
    return out


def test_both_stacks_say_what_history_they_keep() -> None:
    for stack in STACKS:
        assert "contact" in get_stack(stack).history, stack
        parse_scenario(_scenario(stack, "all"))  # accepted, not refused


@pytest.mark.parametrize("stack", STACKS)
def test_late_subscribers_get_the_contacts_history_once(stack: str, tmp_path: Path) -> None:
    replay = _replay(stack, "all")
    t = _run(stack, "all", tmp_path / "run")
    subscriptions, publications, deliveries = t["subscriptions"], t["publications"], t["deliveries"]
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
    assert len(late) == round(0.2 * (NODES - 1)), replay
    live: dict[str, set[int]] = defaultdict(set)  # what some on-time subscriber delivered
    for s in on_time:
        live[s["topic"]] |= got[s["node"]] & by_topic[s["topic"]]
    for topic, ids in by_topic.items():  # the run is a working one: most of it gets through
        assert len(live[topic]) >= 0.95 * len(ids), f"{topic}: live delivery broken; {replay}"
    before = {p["pub_id"] for p in publications if p["t"] < LATE_AT}
    replayed = _replayed(t["events"])
    for s in late:
        node, topic = s["node"], s["topic"]
        missing = sorted(live[topic] - got[node])
        assert not missing, f"late node {node} lacks {missing[:10]}; {replay}"
        mine = replayed[node]
        assert len(mine) == len(set(mine)), f"node {node} replayed an id twice; {replay}"
        # what was issued before it subscribed came from the contact's history, and only
        # publications of its topic did
        lacking = sorted(by_topic[topic] & before - set(mine))
        assert not lacking, f"node {node}: {lacking[:10]} not replayed; {replay}"
        assert set(mine) <= by_topic[topic], f"node {node} replayed another topic's; {replay}"
    assert set(replayed) == {s["node"] for s in late}, f"only late subscribers replay; {replay}"
    # each replayed copy carries its publish time as the contact dated it: its first copy,
    # a few group hops after the publication, and the answer's transit
    check_publish_times(tmp_path / "run", replay, within=0.5)


@pytest.mark.parametrize("stack", STACKS)
def test_a_count_bounds_what_a_late_subscriber_replays(stack: str, tmp_path: Path) -> None:
    replay = _replay(stack, "5")
    t = _run(stack, "5", tmp_path / "run")
    publications = t["publications"]
    late = [s for s in t["subscriptions"] if s["t_start"] >= LATE_AT]
    topic_of = {p["pub_id"]: p["topic"] for p in publications}
    issued = {p["pub_id"]: p["t"] for p in publications}
    replayed = _replayed(t["events"])
    assert set(replayed) == {s["node"] for s in late}, replay
    for s in late:
        mine = replayed[s["node"]]
        assert 1 <= len(mine) <= 5, f"node {s['node']} replayed {len(mine)}; {replay}"
        assert {topic_of[i] for i in mine} == {s["topic"]}, replay
        # the newest ones: none of them older than a second before it subscribed (10 a
        # second on two topics, so 5 of one topic span about a second)
        oldest = min(issued[i] for i in mine)
        assert oldest >= LATE_AT - 2.0, f"node {s['node']}: replayed from t={oldest}; {replay}"
    copies = Counter((d["pub_id"], d["node"]) for d in t["deliveries"])
    assert max(copies.values()) == 1, replay


def test_the_same_seed_gives_the_same_history_byte_for_byte(tmp_path: Path) -> None:
    small = _scenario("clique", "all").replace("publications = 150", "publications = 40")
    for name in ("a", "b"):
        run_scenario(
            parse_scenario(small.replace("late_at = 20.0", "late_at = 10.0")), tmp_path / name
        )
    for table in ("deliveries", "events", "messages"):
        first = (tmp_path / "a" / table / "part-00000.parquet").read_bytes()
        assert first == (tmp_path / "b" / table / "part-00000.parquet").read_bytes(), table


# ---------------------------------------------------------------- an insider against the bounds
class Replays:
    def __init__(self) -> None:
        self.replayed: dict[NodeId, list[int]] = defaultdict(list)
        self.traced: dict[NodeId, list[int]] = defaultdict(list)

    def __call__(self, node: NodeId, out: Output) -> None:
        if isinstance(out, Deliver) and out.replayed:
            self.replayed[node].append(out.pub_id)
        elif isinstance(out, TraceRecord) and out.kind == "history.replayed":
            self.traced[node].append(out.detail["pub_id"])


@pytest.mark.parametrize("stack", STACKS)
def test_an_insider_can_neither_aim_the_history_nor_push_items(stack: str) -> None:
    seed = 3
    replay = f"stack {stack}, seed {seed}; replay: pytest {__file__} -k insider"
    seen = Replays()
    cluster = PoolCluster(get_stack(stack), 7, seed, fifo=False, on_output=seen)
    for node in (1, 2, 3, 4):
        cluster.command(node, Subscribe("t"))
    cluster.quiesce(5.0)
    for k in range(10):
        cluster.command(1, Publish("t", 100 + k, b"x%d" % k))
        cluster.quiesce(0.5)
    contact, late, insider = cluster.nodes[0], cluster.nodes[5], cluster.nodes[2]
    assert isinstance(contact, CliqueNode) and isinstance(late, CliqueNode)
    assert isinstance(insider, CliqueNode) and insider.bootstrap is not None
    assert list(contact.retained["t"].items) == [100 + k for k in range(10)], replay

    cluster.command(5, Subscribe("t", history=HistoryRequest(count=3)))
    assert "t" in late.waits, replay
    in_rid = late.instances["t"].in_.rid
    # a member pushes a publication straight at the waiting subscriber's in relay: refused
    forged = HistoryPub(
        topic="t", rid=in_rid, prev=1, sink=5, direct=True, hop=1,
        pub_id=999, payload=b"forged", total=1, age=0.0,
    )  # fmt: skip
    cluster.run(5, Receive(2, forged))
    assert late.counters.get("history_refused") == 1, replay
    cluster.quiesce(5.0)
    assert sorted(seen.replayed[5]) == [107, 108, 109], f"{seen.replayed[5]}; {replay}"
    assert seen.traced[5] == seen.replayed[5], replay
    assert 999 not in cluster.delivered_ids(5), replay

    # a member asks the contact for the history on behalf of another node (its in relay):
    # the contact handles the Join but sends no history to a node that did not ask
    aimed = JoinWithHistory(
        topic="t", rid=0, prev=0, sink=0, direct=False, hop=0,
        node=Ref(owner=6, rid=1, sink=6, is_in=True), count=0, seconds=0.0,
    )  # fmt: skip
    send = insider.layer.send(insider.bootstrap, aimed, cluster.now)
    assert send is not None and send.dst == 0
    cluster.run(0, Receive(2, send.message))
    assert contact.counters.get("history_refused") == 1, replay
    # asking again for itself within history_interval gets nothing either
    cluster.command(5, Subscribe("t", history=HistoryRequest()))
    cluster.quiesce(5.0)
    assert contact.counters.get("history_over_limit") == 1, replay
    assert sorted(seen.replayed[5]) == [107, 108, 109], replay
    assert not seen.replayed[2] and not seen.replayed[6], replay
