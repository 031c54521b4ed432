"""``pubmesh cluster`` plays ``recover`` faults: killed node processes started again, with real
processes over loopback.

* A brokertree cluster (3 brokers, δ = 1, one topic, 20 publications a second) run with
  ``--data-dir``: a subscribing client and a broker are SIGKILLed mid-run and recovered with
  ``durable = true`` 1.5 s later. Both come back (``recover`` rows); the client delivers no
  publication twice across its two lives, and misses none: what was issued while it was
  subscribed in either life, and what was issued while it was down, which comes back from the
  topic's history at its resubscription (``history.replayed``). The other clients get every
  publication, the restarted client's second life's included (the δ = 1 tree survives one
  broker down). That last check found a controller race: a client restarted beside a broker
  was booted with the broker's id still unknown (0), so its broker list differed from the
  brokers' and they refused it as miswired; the contacts' ids are now kept from the start.
* ``durable = true`` without ``--data-dir`` is refused in one line, exit status 2.

The client's first life is read from its data directory while it is down (its ``delivered``
table, committed before each delivery): a SIGKILLed node's last trace segment is lost, and in
its next life a second delivery would overwrite the row's time.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from pubmesh.net.cluster.controller import KillAt, RecoverAt, SubscribeLate, timeline
from pubmesh.net.cluster.workload import plan
from pubmesh.scenario.model import parse_scenario
from support.cluster import table
from support.netnode import node_env

SEED = 3
CRASH_AT = 3.5
RECOVER_AT = 5.0
CLIENT = 5
BROKER = 1

SCENARIO = f"""
[run]
stack = "brokertree"
nodes = 9
seed = {SEED}
duration = 16.0
start_spread = 0.0
[workload]
topics = 1
subscriptions_per_node = 1
publications = 100
publish_start = 2.0
publish_rate = 20.0
payload_size = 64
[stack.brokertree]
brokers = 3
delta = 1
[[faults]]
at = {CRASH_AT}
kind = "crash"
nodes = [{BROKER}, {CLIENT}]
[[faults]]
at = {RECOVER_AT}
kind = "recover"
nodes = [{BROKER}, {CLIENT}]
durable = true
"""


def _command(workload: Path, out: Path, data: Path | None) -> list[str]:
    command = [sys.executable, "-m", "pubmesh", "cluster", "--stack", "brokertree"]
    command += ["--nodes", "9", "--workload", str(workload), "--out", str(out), "--quiet"]
    return command + ([] if data is None else ["--data-dir", str(data)])


def _delivered_rows(db: Path) -> dict[int, float]:
    """The ``delivered`` table of a node's store, read-only: pub_id -> wall time."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = connection.execute("SELECT pub_id, t FROM delivered").fetchall()
    finally:
        connection.close()
    # the store keeps ids as signed 64-bit integers
    return {pub_id & ((1 << 64) - 1): t for pub_id, t in rows}


def test_a_killed_client_and_broker_recover_durably_with_no_gap_and_no_duplicate(
    tmp_path: Path,
) -> None:
    workload = tmp_path / "restart.toml"
    workload.write_text(SCENARIO)
    out, data = tmp_path / "run", tmp_path / "data"
    command = _command(workload, out, data)
    replay = f"seed {SEED}; replay: {' '.join(command)}"
    started = time.monotonic()
    process = subprocess.Popen(
        command, env=node_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # time 0 of the run, then the client's first life as its store holds it, while it is
        # down (between the crash and the recovery)
        started_json = out / ".partial" / "started.json"
        deadline = time.monotonic() + 90
        while not started_json.is_file() and time.monotonic() < deadline:
            assert process.poll() is None, f"cluster ended early; {replay}"
            time.sleep(0.05)
        t0 = json.loads(started_json.read_text())["t0"]
        time.sleep(max(0.0, t0 + (CRASH_AT + RECOVER_AT) / 2 - time.time()))
        first_life = _delivered_rows(data / f"node-{CLIENT}" / "node.db")
        _stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    elapsed = time.monotonic() - started
    assert process.returncode == 0, f"cluster failed ({process.returncode}); {replay}\n{stderr}"
    info = json.loads((out / "run.json").read_text())
    assert info["unexpected_exits"] == [] and info["trace_complete"], (info, replay)
    assert info["recovered"] == {str(BROKER): 2, str(CLIENT): 2}, (info, replay)
    assert info["killed"] == [], (info, replay)

    nodes = table(out, "nodes")
    events = {(r["node"], r["event"]): r["t"] for r in nodes}
    for node in (BROKER, CLIENT):
        assert (node, "crash") in events and (node, "recover") in events, (nodes, replay)
        assert events[(node, "crash")] < events[(node, "recover")], (nodes, replay)
    crashed, back = events[(CLIENT, "crash")], events[(CLIENT, "recover")]
    faults = [(f["kind"], json.loads(f["detail"])) for f in table(out, "faults")]
    assert ("recover", {"nodes": [BROKER, CLIENT], "durable": True}) in faults, faults

    # the client's subscription: ended at the crash, open again from its recovery (it
    # resubscribed by itself, from its data directory)
    spans = sorted(
        (r["t_start"], r["t_end"]) for r in table(out, "subscriptions") if r["node"] == CLIENT
    )
    assert len(spans) == 2 and spans[0][1] == crashed, (spans, replay)
    assert spans[1] == (back, None), (spans, replay)
    subscribed_at = spans[0][0]

    publications = {p["pub_id"]: p for p in table(out, "publications")}
    assert len(publications) >= 95, (len(publications), replay)
    deliveries = table(out, "deliveries")
    counts = Counter((d["pub_id"], d["node"]) for d in deliveries)
    twice = sorted(pair for pair, n in counts.items() if n > 1)
    assert not twice, f"delivered twice: {twice[:10]}; {replay}"

    # the client: its first life (its store, read while it was down, with the trace's rows
    # of that life) and its second (the trace, complete: it was stopped at the end)
    t_first = {pub_id: t - t0 for pub_id, t in first_life.items()}
    assert all(t < crashed + 0.05 for t in t_first.values()), (t_first, replay)
    life1 = set(first_life) | {
        d["pub_id"] for d in deliveries if d["node"] == CLIENT and d["t"] < crashed
    }
    life2 = {d["pub_id"] for d in deliveries if d["node"] == CLIENT and d["t"] >= back}
    assert not life1 & life2, f"delivered in both lives: {sorted(life1 & life2)}; {replay}"
    assert life1 and life2, (len(life1), len(life2), replay)

    def when(pub_ids: set[int]) -> list[tuple[float, int]]:
        return sorted(
            (round(publications[p]["t"], 3), publications[p]["publisher"]) for p in pub_ids
        )

    owed = {p for p, row in publications.items() if row["t"] >= subscribed_at}
    missing = owed - life1 - life2
    assert not missing, f"client {CLIENT} missed (t, publisher): {when(missing)}; {replay}"
    down = {p for p, row in publications.items() if crashed <= row["t"] < back}
    assert len(down) >= 20, (len(down), replay)
    replayed = {
        json.loads(e["detail"])["pub_id"]
        for e in table(out, "events")
        if e["kind"] == "history.replayed" and e["node"] == CLIENT
    }
    assert down <= life2 & replayed, (
        f"issued while client {CLIENT} was down, not replayed: {when(down - (life2 & replayed))}; "
        f"{replay}"
    )

    # every other client got every publication, the restarted client's second life's too
    clients = {r["node"] for r in nodes if r["role"] == "peer"} - {CLIENT}
    assert len(clients) == 5, (clients, replay)
    second = {
        p for p, row in publications.items() if row["publisher"] == CLIENT and row["t"] >= back
    }
    assert second, (publications, replay)
    for client in sorted(clients):
        lost = {p for p in publications if (p, client) not in counts}
        assert not lost, f"client {client} missed (t, publisher): {when(lost)}; {replay}"
    print(f"cluster run: {elapsed:.1f} s; client {CLIENT} down {crashed:.2f}-{back:.2f} s")


def test_the_timeline_recovers_the_killed_nodes_and_subscribes_them_again() -> None:
    """The plan's recover becomes a RecoverAt after the crash, and the recovered client's
    subscription a SubscribeLate at its recovery (skipped when it restarted durably: it
    subscribed again by itself, and the controller records what it reports)."""
    for durable in (True, False):
        text = SCENARIO.replace("durable = true", f"durable = {str(durable).lower()}")
        events = timeline(plan(parse_scenario(text)), 16.0)
        faults = [e for e in events if isinstance(e, KillAt | RecoverAt)]
        assert faults == [
            KillAt(CRASH_AT, 0, (BROKER, CLIENT)),
            RecoverAt(RECOVER_AT, 1, (BROKER, CLIENT), durable),
        ], faults
        again = [e for e in events if isinstance(e, SubscribeLate)]
        assert again == [SubscribeLate(RECOVER_AT, CLIENT, ("t0",), None)], again
        assert events.index(faults[1]) < events.index(again[0]), events


def test_a_durable_recover_without_a_data_directory_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    workload = tmp_path / "restart.toml"
    workload.write_text(SCENARIO)
    command = _command(workload, tmp_path / "run", None)
    result = subprocess.run(command, env=node_env(), capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr, " ".join(command))
    assert len(lines) == 1, lines
    assert "[[faults]] #2" in lines[0] and "durable recover needs --data-dir" in lines[0], lines
    assert not (tmp_path / "run").exists()
