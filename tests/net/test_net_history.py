"""Topic history for late subscribers in the network runtime, with real processes
over loopback:

* ``pubmesh cluster`` plays a scenario's late subscribers as the plan says (subscribed at
  ``late_at``, not at their start, asking for the history), and on gossip and chord each of
  them delivers every publication of its topic issued before it subscribed, once, replayed
  from its neighbours' message caches (gossip) or its publishers' own (chord)
  (``history.replayed`` events).
* The control line's ``history`` field (and the shell's ``--history``): a bad value is one
  error line naming the problem and the node keeps serving; a stack that keeps no history
  (the tests' tiny stack, tests/tinystack) refuses the request; the delivery line says
  ``"replayed": true`` only for a replayed publication, and the live lines stay as they were.
* The API: ``Node.subscribe(topic, history=...)`` yields the past as ``Delivery`` values with
  ``replayed`` set, and refuses a bad request or a stack without history with
  ``InvalidCommand``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pubmesh.api import Delivery, Node
from pubmesh.net.admission import InvalidCommand
from pubmesh.net.cluster.controller import SubscribeLate, held_back, timeline
from pubmesh.net.cluster.workload import plan
from pubmesh.proto.core import HistoryRequest
from pubmesh.scenario.model import parse_scenario
from support.cluster import run_cluster, table
from support.netnode import KEY_TEXT, NodeProcess

# ------------------------------------------------------------------------------------------
# A cluster with late subscribers
# ------------------------------------------------------------------------------------------
SEED = 5
LATE_AT = 4.5
#: 8 nodes on one topic; 40 publications at 20/s from 2 s (the overlay has formed by then)
#: to 3.95 s; a quarter of the nodes subscribes at 4.5 s, after the last one, asking for all
#: of the topic's history (gossip: Plumtree keeps payloads 30 s; chord: each publisher keeps
#: its own 10 min: all of them are retained)
LATE_SCENARIO = f"""
[run]
stack = "gossip"
nodes = 8
seed = {SEED}
duration = 7.0
start_spread = 0.5
[workload]
topics = 1
subscriptions_per_node = 1
publications = 40
publish_start = 2.0
publish_rate = 20.0
payload_size = 64
late_fraction = 0.25
late_at = {LATE_AT}
history = "all"
"""


def test_the_timeline_subscribes_late_subscribers_at_late_at_with_their_history() -> None:
    scenario = parse_scenario(LATE_SCENARIO)
    planned = plan(scenario)
    late = {s.node for s in planned.subscriptions if s.history is not None}
    assert len(late) == 2, planned.subscriptions
    held = held_back(planned, scenario.workload.late_fraction)
    assert held == late
    events = timeline(planned, scenario.run.duration, held)
    subscribed = [e for e in events if isinstance(e, SubscribeLate)]
    assert sorted((e.node, e.t, e.topics, e.history) for e in subscribed) == sorted(
        (node, LATE_AT, ("t0",), "all") for node in late
    )
    # the same plan without late subscribers: played as before (subscribed at their start)
    plain = parse_scenario(LATE_SCENARIO, overrides=["workload.late_fraction=0.0"])
    assert held_back(plan(plain), 0.0) == frozenset()
    assert not [e for e in timeline(plan(plain), 7.0) if isinstance(e, SubscribeLate)]


#: what a stack's run needs besides the scenario: brokertree's brokers (three of the eight
#: nodes, δ = 1; the five clients are the workload)
STACK_TABLES = {"brokertree": "[stack.brokertree]\nbrokers = 3\ndelta = 1\n"}


@pytest.mark.parametrize("stack", ["gossip", "chord", "brokertree"])
def test_late_subscribers_of_a_cluster_get_the_topics_history(tmp_path: Path, stack: str) -> None:
    text = LATE_SCENARIO.replace('stack = "gossip"', f'stack = "{stack}"')
    text += STACK_TABLES.get(stack, "")
    scenario_file = tmp_path / "late.toml"
    scenario_file.write_text(text)
    out = tmp_path / "run"
    info = run_cluster(out, "--stack", stack, "--nodes", "8", "--workload", str(scenario_file))
    replay = (
        f"seed {SEED}; replay: pubmesh cluster --stack {stack} --nodes 8 --workload "
        f"{scenario_file} --out {out}   (scenario:{text})"
    )
    planned = plan(parse_scenario(text))
    late = sorted({s.node for s in planned.subscriptions if s.history is not None})
    assert info.get("late_subscribers") == late, (info.get("late_subscribers"), replay)

    subscriptions = {(s["node"], s["topic"]): s["t_start"] for s in table(out, "subscriptions")}
    for node in late:
        # subscribed at late_at (not at its start), within what a loaded machine lags
        assert LATE_AT - 0.05 <= subscriptions[(node, "t0")] <= LATE_AT + 1.5, (
            node,
            subscriptions,
            replay,
        )
    publications = table(out, "publications")
    assert len(publications) == 40, replay
    deliveries = table(out, "deliveries")
    pairs = Counter((d["pub_id"], d["node"]) for d in deliveries)
    twice = sorted(pair for pair, n in pairs.items() if n > 1)
    assert not twice, f"delivered twice (pub_id, node): {twice[:10]}; {replay}"

    replayed: dict[int, set[int]] = {}
    for event in table(out, "events"):
        if event["kind"] == "history.replayed":
            replayed.setdefault(event["node"], set()).add(json.loads(event["detail"])["pub_id"])
    assert set(replayed) <= set(late), (sorted(replayed), late, replay)
    for node in late:
        start = subscriptions[(node, "t0")]
        before = {p["pub_id"] for p in publications if p["topic"] == "t0" and p["t"] < start}
        assert len(before) == 40, (node, start, replay)
        got = {pub_id for pub_id, n in pairs if n == node}
        assert before <= got, (
            f"late subscriber {node} (subscribed at {start:.2f} s) missed "
            f"{sorted(before - got)} of the history; {replay}"
        )
        # nothing issued before it subscribed could reach it live: all of it was replayed
        assert before <= replayed.get(node, set()), (node, sorted(replayed.get(node, ())), replay)
    # the others delivered everything live, as without late subscribers
    for node in set(planned.topics) - set(late):
        got = {pub_id for pub_id, n in pairs if n == node}
        assert got == {p["pub_id"] for p in publications}, (node, replay)
        assert node not in replayed, (node, replay)


# ------------------------------------------------------------------------------------------
# The control line and the shell form
# ------------------------------------------------------------------------------------------
def _deliveries(node: NodeProcess) -> list[dict[str, Any]]:
    return node.matching(lambda r: r.get("event") == "deliver")


def test_a_bad_history_is_one_error_line_and_the_node_keeps_serving(tmp_path: Path) -> None:
    node = NodeProcess(["--stack", "gossip", "--listen", "127.0.0.1:0"], log=tmp_path / "n.log")
    try:
        for line, problem in [
            ('{"op": "subscribe", "topic": "x", "history": "bogus"}', "'bogus' is not all"),
            ('{"op": "subscribe", "topic": "x", "history": 0}', "a count must be ≥ 1"),
            ('{"op": "subscribe", "topic": "x", "history": true}', "history must be"),
            ("subscribe x --history 5 minutes", "not JSON"),
            ("subscribe x --history", "--history needs a value"),
            ("subscribe x --history soon", "'soon' is not all"),
        ]:
            answer = node.command(line)
            assert answer["ok"] is False, (line, answer)
            assert problem in answer["error"] and "\n" not in answer["error"], (line, answer)
        assert node.proc.poll() is None
        # still serving: a valid request, in either form, is taken and said back
        answer = node.command({"op": "subscribe", "topic": "x", "history": 50})
        assert answer["ok"] is True and answer["history"] == "50", answer
        answer = node.command("subscribe y --history 90s")
        assert answer["ok"] is True and answer["history"] == "90s", answer
        answer = node.command({"op": "subscribe", "topic": "z"})
        assert answer["ok"] is True and "history" not in answer, answer
        assert sorted(node.command({"op": "stats"})["stats"]["subscriptions"]) == ["x", "y", "z"]
    finally:
        assert node.stop() == 0


def test_a_stack_without_history_refuses_a_history_request(tmp_path: Path) -> None:
    node = NodeProcess(["--stack", "tiny", "--listen", "127.0.0.1:0"], log=tmp_path / "n.log")
    try:
        for line in (
            '{"op": "subscribe", "topic": "x", "history": "all"}',
            "subscribe x --history 5m",
        ):
            answer = node.command(line)
            assert answer["ok"] is False, (line, answer)
            assert answer["error"] == "subscribe: stack tiny keeps no topic history", answer
        assert node.command({"op": "stats"})["stats"]["subscriptions"] == []
        answer = node.command({"op": "subscribe", "topic": "x"})
        assert answer["ok"] is True, answer
    finally:
        assert node.stop() == 0


#: what a delivery line held before histories: a live line keeps exactly these keys
LIVE_KEYS = {"event", "topic", "pub_id", "hops", "size", "payload", "t"}


def test_the_delivery_line_marks_replayed_publications_only(tmp_path: Path) -> None:
    first = NodeProcess(["--stack", "gossip", "--listen", "127.0.0.1:0"], log=tmp_path / "a.log")
    second = None
    try:
        assert first.command("subscribe news")["ok"] is True
        issued = time.time()
        past = {first.command(f"publish news old {i}")["pub_id"] for i in range(3)}
        issued_by = time.time()
        time.sleep(1.0)  # their age when replayed: a second at least
        second = NodeProcess(
            ["--stack", "gossip", "--listen", "127.0.0.1:0", "--contact", first.address],
            log=tmp_path / "b.log",
        )
        answer = second.command("subscribe news --history all")
        assert answer["ok"] is True and answer["history"] == "all", answer
        for pub_id in past:
            second.wait_event(
                lambda r, p=pub_id: r.get("event") == "deliver" and r["pub_id"] == p,
                15,
                f"the replayed delivery of {pub_id}",
            )
        # once the history is in, publish until one arrives live
        live: set[int] = set()
        for attempt in range(75):
            live.add(first.command(f"publish news new {attempt}")["pub_id"])
            time.sleep(0.2)
            if any(r["pub_id"] in live for r in _deliveries(second)):
                break
        lines = _deliveries(second)
        by_id = {r["pub_id"]: r for r in lines}
        assert len(by_id) == len(lines), lines  # never twice
        for pub_id in past:
            assert by_id[pub_id].get("replayed") is True, by_id[pub_id]
            assert by_id[pub_id]["payload"].startswith("old "), by_id[pub_id]
            # its original publish time (the wall clock, as t), not its delivery's
            published = by_id[pub_id]["published"]
            assert issued - 0.01 <= published <= issued_by + 0.5, (issued, by_id[pub_id])
            assert by_id[pub_id]["t"] - published >= 1.0, by_id[pub_id]
        arrived = [by_id[p] for p in live if p in by_id]
        assert arrived, f"no live delivery of {sorted(live)}: {lines}"
        assert all("replayed" not in r and "published" not in r for r in arrived[-1:]), arrived
        assert all(r.get("replayed", True) is True for r in lines), lines  # never false
        # the publisher's own lines are those of before, byte for byte in their keys
        for record in _deliveries(first):
            assert set(record) == LIVE_KEYS, record
    finally:
        for node in (first, second):
            if node is not None:
                node.stop(signal.SIGKILL)


# ------------------------------------------------------------------------------------------
# The API
# ------------------------------------------------------------------------------------------
def test_the_api_hands_over_the_history_marked_replayed() -> None:
    async def main() -> None:
        async with (
            Node("gossip", listen="127.0.0.1:0", key=KEY_TEXT) as first,
            Node("gossip", listen="127.0.0.1:0", contact=first.address, key=KEY_TEXT) as late,
        ):
            await first.subscribe("news")
            issued = time.time()
            past = {(await first.publish("news", f"old {i}")).pub_id for i in range(3)}
            issued_by = time.time()
            with pytest.raises(InvalidCommand, match="'soon' is not all"):
                await late.subscribe("news", history="soon")
            with pytest.raises(InvalidCommand, match="a count must be ≥ 1"):
                await late.subscribe("news", history=0)
            assert "news" not in late.runtime.subscribed  # refused before anything changed
            news = await late.subscribe("news", history=HistoryRequest(count=2))
            got = [await news.get(timeout=15) for _ in range(2)]
            assert all(isinstance(d, Delivery) and d.replayed for d in got), got
            assert {d.pub_id for d in got if isinstance(d, Delivery)} <= past
            for d in got:  # each with its original publish time
                assert isinstance(d, Delivery) and d.published is not None, d
                assert issued - 0.01 <= d.published <= issued_by + 0.5 <= d.t + 0.5, d
            # later publications arrive live, not marked
            for _ in range(50):
                receipt = await first.publish("news", "new")
                try:
                    item = await news.get(timeout=0.3)
                except TimeoutError:
                    continue
                assert isinstance(item, Delivery) and not item.replayed, item
                assert item.published is None, item
                assert item.pub_id not in past
                break
            else:
                raise AssertionError(f"no live delivery after {receipt}")

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_api_refuses_a_history_on_a_stack_that_keeps_none() -> None:
    async def main() -> None:
        async with Node("tiny", listen="127.0.0.1:0", key=KEY_TEXT) as node:
            with pytest.raises(InvalidCommand, match="stack tiny keeps no topic history"):
                await node.subscribe("news", history="all")
            assert "news" not in node.runtime.subscribed
            subscription = await node.subscribe("news")
            await subscription.close()

    asyncio.run(asyncio.wait_for(main(), 60))
