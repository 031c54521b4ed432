"""Topic history for late subscribers on the chord stack, in the simulator (see
docs/protocols/chord.md §14).

Every chord node retains the publications it issued; a late subscriber broadcasts a history
query down its own binomial tree, and every publisher whose retained publications match the
subscriber's filter sends them straight to it. A share of the workload nodes
(``[workload] late_fraction``) subscribes at ``late_at``, after the publications began (and
they go on across ``late_at``), with a content filter over the publications' attributes: each
late subscriber must end with every matching publication issued before it subscribed (from
the history), and every later one the on-time subscribers all deliver (live), each once.

The ring is built by joins, not warm: the simulator's warm start subscribes every initial node
at t = 0, late ones included (``pubmesh.sim.actions.ScenarioActions.warm_start``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pubmesh.proto.chord.params import ChordParams
from pubmesh.proto.content import matches
from pubmesh.scenario.model import parse_scenario
from pubmesh.scenario.workload import plan
from pubmesh.sim.runner import run_scenario
from support.history import check_publish_times

SEED = 1
LATE_AT = 10.0
#: the query leaves history_delay after the subscription; what is issued before the query
#: reaches its publisher may come replayed
QUERY_BY = LATE_AT + ChordParams().history_delay + 0.5
SCENARIO = f"""
[run]
stack = "chord"
nodes = 32
seed = {SEED}
duration = 15.0
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
[stack.chord]
stabilize_period = 1.0
fix_period = 1.0
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


def test_late_chord_subscribers_get_the_publishers_history_once(tmp_path: Path) -> None:
    run = _Run(SCENARIO, tmp_path / "run")
    replay = _replay(SCENARIO)
    copies = Counter((d["pub_id"], d["node"]) for d in run.deliveries)
    assert max(copies.values()) == 1, f"a publication delivered twice at a node; {replay}"
    late = [s for s in run.subscriptions if s["t_start"] >= LATE_AT]
    on_time = [s for s in run.subscriptions if s["t_start"] < LATE_AT]
    assert len(late) == round(0.2 * 32) and all(s["filter"] for s in late), replay
    # what the live system carries to every on-time subscriber it matches
    carried: dict[int, bool] = {}
    for s in on_time:
        for pub_id in run.wanted(s):
            carried[pub_id] = carried.get(pub_id, True) and pub_id in run.got[s["node"]]
    for s in late:
        node, wanted = s["node"], run.wanted(s)
        before = {i for i in wanted if run.publications[i]["t"] < LATE_AT}
        assert before, f"late node {node}: nothing to replay, a weak case; {replay}"
        missing = sorted(before - run.got[node])
        assert not missing, f"late node {node} lacks {missing[:10]} of its history; {replay}"
        after = {i for i in wanted - before if carried.get(i, False)}
        missing = sorted(after - run.got[node])
        assert not missing, f"late node {node} lacks live {missing[:10]}; {replay}"
        replayed = set(run.replayed[node])
        assert len(replayed) == len(run.replayed[node]), f"node {node} replays twice; {replay}"
        # the history gave what was issued before the subscription, and only matching ones
        # issued before the query
        assert replayed >= before, f"node {node}: not replayed {before - replayed}; {replay}"
        assert replayed <= wanted, f"node {node} replayed what it did not ask; {replay}"
        assert all(run.publications[i]["t"] < QUERY_BY for i in replayed), replay
    assert set(run.replayed) == {s["node"] for s in late}, f"only late ones replay; {replay}"
    # one query per late subscriber, down its tree to every other node (N − 1 messages);
    # an item per publication it had not had live (a few of those are live copies in flight)
    assert run.messages["ChordHistoryQuery"] == len(late) * (32 - 1), replay
    items = run.messages["ChordHistoryItem"]
    assert sum(len(r) for r in run.replayed.values()) <= items, replay
    # each replayed copy carries its publish time, dated by its publisher: off by the
    # answer's one hop at most (≤ 50 ms)
    check_publish_times(tmp_path / "run", replay, within=0.06)


def test_a_count_request_gets_at_most_that_many_from_each_publisher(tmp_path: Path) -> None:
    text = SCENARIO.replace('history = "all"', 'history = "2"').replace("nodes = 32", "nodes = 20")
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
        for publisher, sent in per_publisher.items():
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
            assert sent == len(replayed)


CRASH_AT, RECOVER_AT = 7.0, 8.0


def test_a_publisher_restarted_durably_still_answers_with_what_it_published(
    tmp_path: Path,
) -> None:
    """What a publisher retains is part of what its data directory keeps:
    eight publishers crash at 7 s and come back at 8 s, before the late subscribers ask.
    Restarted durably, they answer with what they published before the crash; restarted
    empty, none of it comes (the contrast: the check can fail)."""
    planned = plan(parse_scenario(SCENARIO))
    late = {s.node for s in planned.subscriptions if s.history is not None}
    early = [p for p in planned.publications if p.t < CRASH_AT]
    victims = sorted({p.publisher for p in early} - late - set(planned.contacts))[:8]
    assert len(victims) == 8, (victims, planned.contacts)
    faults = (
        f'\n[[faults]]\nat = {CRASH_AT}\nkind = "crash"\nnodes = {victims}\n'
        f'[[faults]]\nat = {RECOVER_AT}\nkind = "recover"\nnodes = {victims}\n'
    )
    theirs: dict[bool, dict[int, set[int]]] = {}
    for durable in (True, False):
        text = SCENARIO + faults + f"durable = {str(durable).lower()}\n"
        replay = _replay(text)
        # the same publications up to the crash (after it, no victim is drawn while down)
        assert [p for p in plan(parse_scenario(text)).publications if p.t < CRASH_AT] == early
        run = _Run(text, tmp_path / f"durable-{durable}")
        mine = {
            i
            for i, p in run.publications.items()
            if p["publisher"] in victims and p["t"] < CRASH_AT
        }
        theirs[durable] = {}
        for s in run.subscriptions:
            if s["t_start"] >= LATE_AT:
                wanted = run.wanted(s) & mine
                theirs[durable][s["node"]] = wanted & set(run.replayed[s["node"]])
                if durable:
                    lacking = sorted(wanted - set(run.replayed[s["node"]]))
                    assert not lacking, f"node {s['node']} lacks {lacking[:10]}; {replay}"
    assert sum(map(len, theirs[True].values())) >= 5, theirs  # a case with something to lose
    assert not any(theirs[False].values()), f"restarted empty, yet answered: {theirs[False]}"
