"""Topic history for late subscribers on the brokertree stack, in the simulator (see
docs/protocols/brokertree.md §14).

Every client retains the publications it issued; a late subscriber, once its subscription is
confirmed, sends a history query to every broker, each broker forwards it to its clients, and
every publisher whose retained publications match the subscriber's filter sends them straight
to it. A share of the workload's clients (``[workload] late_fraction``) subscribes at
``late_at``, after the publications began (and they go on across ``late_at``), with a content
filter over the publications' attributes: each late subscriber must end with every matching
publication issued before it subscribed (from the history), and every later one the on-time
subscribers all deliver (live), each once and in each publisher's order.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pubmesh.proto.content import matches
from pubmesh.scenario.model import parse_scenario
from pubmesh.sim.runner import run_scenario
from support.history import check_publish_times

SEED = 1
LATE_AT = 10.0
NODES = 40
BROKERS = 12
SCENARIO = f"""
[run]
stack = "brokertree"
nodes = {NODES}
seed = {SEED}
duration = 20.0
start_spread = 1.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 2
subscriptions_per_node = 1
publications = 110
publish_start = 4.0
publish_rate = 10.0
publisher = "any"
payload_size = 50
late_fraction = 0.2
late_at = {LATE_AT}
history = "all"
[workload.attributes]
symbol = {{ values = 8, zipf = 1.0 }}
price = {{ min = 0.0, max = 1000.0 }}
[workload.filters]
constraints = 1
selectivity = 0.3
[stack.brokertree]
brokers = {BROKERS}
delta = 2
topology_seed = {SEED}
"""


def _rows(run_dir: Path, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(run_dir / table).to_pylist()
    return rows


class _Run:
    """One run's tables, read the way the assertions need them."""

    def __init__(self, text: str, run_dir: Path) -> None:
        run_scenario(parse_scenario(text), run_dir)
        self.subscriptions = _rows(run_dir, "subscriptions")
        self.publications = {p["pub_id"]: p for p in _rows(run_dir, "publications")}
        self.deliveries = _rows(run_dir, "deliveries")
        self.messages = Counter(m["type"] for m in _rows(run_dir, "messages"))
        self.got: dict[int, set[int]] = defaultdict(set)
        for d in self.deliveries:
            self.got[d["node"]].add(d["pub_id"])
        self.replayed: dict[int, list[int]] = defaultdict(list)
        for e in _rows(run_dir, "events"):
            if e["kind"] == "history.replayed":
                self.replayed[e["node"]].append(json.loads(e["detail"])["pub_id"])

    def wanted(self, subscription: dict[str, Any]) -> set[int]:
        """The publications a subscription matches (its topic and its filter)."""
        conj = json.loads(subscription["filter"]) if subscription["filter"] else {}
        return {
            pub_id
            for pub_id, p in self.publications.items()
            if p["topic"] == subscription["topic"]
            and matches(conj, json.loads(p["attributes"]) if p["attributes"] else {})
        }


def _replay(text: str) -> str:
    return f"seed {SEED}; replay: pubmesh sim FILE (the scenario in {__file__}:\n{text})"


def test_late_brokertree_subscribers_get_the_publishers_history_once_in_order(
    tmp_path: Path,
) -> None:
    run = _Run(SCENARIO, tmp_path / "run")
    replay = _replay(SCENARIO)
    copies = Counter((d["pub_id"], d["node"]) for d in run.deliveries)
    assert max(copies.values()) == 1, f"a publication delivered twice at a node; {replay}"
    late = [s for s in run.subscriptions if s["t_start"] >= LATE_AT]
    on_time = [s for s in run.subscriptions if s["t_start"] < LATE_AT]
    clients = NODES - BROKERS
    assert len(late) == round(0.2 * clients) and all(s["filter"] for s in late), replay
    # what the live system carries to every on-time subscriber it matches
    carried: dict[int, bool] = {}
    for s in on_time:
        for pub_id in run.wanted(s):
            carried[pub_id] = carried.get(pub_id, True) and pub_id in run.got[s["node"]]
    for s in late:
        node, wanted = s["node"], run.wanted(s)
        before = {i for i in wanted if run.publications[i]["t"] < LATE_AT}
        assert before, f"late node {node}: nothing to replay, a weak case; {replay}"
        missing = sorted(i for i in before - run.got[node] if carried.get(i, True))
        assert not missing, f"late node {node} lacks {missing[:10]} of its history; {replay}"
        after = {i for i in wanted - before if carried.get(i, False)}
        assert after, f"late node {node}: nothing live after late_at, a weak case; {replay}"
        missing = sorted(after - run.got[node])
        assert not missing, f"late node {node} lacks live {missing[:10]}; {replay}"
        replayed = set(run.replayed[node])
        assert len(replayed) == len(run.replayed[node]), f"node {node} replays twice; {replay}"
        assert replayed >= before, f"node {node}: not replayed {before - replayed}; {replay}"
        assert replayed <= wanted, f"node {node} replayed what it did not ask; {replay}"
    assert set(run.replayed) == {s["node"] for s in late}, f"only late ones replay; {replay}"
    # each publisher's order at every node, replayed and live together
    seen: dict[tuple[int, int], float] = {}
    for d in sorted(run.deliveries, key=lambda d: d["t"]):
        p = run.publications[d["pub_id"]]
        key = (d["node"], p["publisher"])
        assert p["t"] >= seen.get(key, -1.0), (
            f"node {d['node']} delivered {d['pub_id']} from {p['publisher']} out of order; {replay}"
        )
        seen[key] = p["t"]
    # one query per late subscriber to every broker, forwarded by each to its clients; an
    # item per matching retained publication
    assert run.messages["HistoryAsk"] >= len(late) * BROKERS, replay
    items = run.messages["HistoryPub"]
    own = sum(
        1
        for node, ids in run.replayed.items()
        for i in ids
        if run.publications[i]["publisher"] == node
    )
    assert 0 < sum(len(r) for r in run.replayed.values()) <= items + own, replay
    # each replayed copy carries its publish time, dated by its publisher (items held until
    # the flush count their wait): off by the answer's one hop at most (≤ 50 ms)
    check_publish_times(tmp_path / "run", replay, within=0.06)


def test_a_count_request_gets_at_most_that_many_from_each_publisher(tmp_path: Path) -> None:
    text = SCENARIO.replace('history = "all"', 'history = "2"')
    run = _Run(text, tmp_path / "run")
    replay = _replay(text)
    late = [s for s in run.subscriptions if s["t_start"] >= LATE_AT]
    assert late and run.replayed, replay
    for s in late:
        node = s["node"]
        per_publisher = Counter(run.publications[i]["publisher"] for i in run.replayed[node])
        assert max(per_publisher.values(), default=0) <= 2, f"node {node}: {per_publisher}"
        wanted = run.wanted(s)
        assert set(run.replayed[node]) <= wanted, replay
        # the newest two of each publisher: none older than a matching one it did not send
        for publisher in per_publisher:
            mine = sorted(
                (run.publications[i]["t"], i)
                for i in wanted
                if run.publications[i]["publisher"] == publisher
                and run.publications[i]["t"] < LATE_AT
            )
            replayed = {
                i for i in run.replayed[node] if run.publications[i]["publisher"] == publisher
            }
            oldest = min(run.publications[i]["t"] for i in replayed)
            skipped_newer = [i for t, i in mine if t > oldest and i not in replayed]
            assert not skipped_newer, f"node {node} from {publisher}: {skipped_newer}; {replay}"
