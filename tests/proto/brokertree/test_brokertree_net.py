"""brokertree over TCP (docs/protocols/brokertree.md): real processes, real sockets.

A cluster of 18 processes (6 brokers, δ = 2, 12 clients) publishes 200 content-free
publications at 40/s; at 3 s two brokers (= δ) are SIGKILLed (``--kill FRACTION@T:broker``).
The kernel resets their sockets, the survivors' runtimes report the peers down at once, and
the brokers next to them bypass them. Every publication reaches every subscriber exactly once
and in its publisher's order, including those in flight when the brokers died (they are held
and resent, Kazemzadeh & Jacobsen §4.3).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import defaultdict
from pathlib import Path

import pytest

from pubmesh.api import Node
from support.cluster import run_cluster, table
from support.netnode import KEY_TEXT
from support.reliability import delivery_counts, expected_pairs

WORKLOAD = """
[run]
start_spread = 0.0
[workload]
topics = 3
subscriptions_per_node = 2
publications = 200
publish_start = 1.5
publish_rate = 40.0
payload_size = 100
[stack.brokertree]
brokers = 6
delta = 2
topology_seed = 3
"""


def test_delta_killed_brokers_lose_nothing_over_tcp(tmp_path: Path) -> None:
    workload = tmp_path / "workload.toml"
    workload.write_text(WORKLOAD)
    out = tmp_path / "run"
    args = ["--stack", "brokertree", "--nodes", "18", "--workload", str(workload)]
    args += ["--seed", "3", "--kill", "0.34@3:broker"]
    info = run_cluster(out, *args, timeout=240)
    replay = f"replay: pubmesh cluster {' '.join(args)}"
    assert len(info["killed"]) == 2 and all(k < 6 for k in info["killed"]), (info, replay)
    assert info["publications"] == 200, replay
    expected = expected_pairs(out)
    assert len({node for _, node in expected}) == 12, replay
    deliveries = table(out, "deliveries")
    counts = delivery_counts(out)
    duplicates = {pair: n for pair, n in counts.items() if n > 1}
    assert not duplicates, (sorted(duplicates)[:10], replay)
    missing = expected - set(counts)
    assert not missing, (f"{len(missing)} of {len(expected)} missing", sorted(missing)[:10], replay)
    published = {p["pub_id"]: (p["publisher"], p["t"]) for p in table(out, "publications")}
    order: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row in sorted(deliveries, key=lambda r: r["t"]):
        publisher, t = published[row["pub_id"]]
        order[(row["node"], publisher)].append(t)
    for key, times in order.items():
        assert times == sorted(times), (key, replay)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_client_with_the_brokers_in_another_order_is_refused_out_loud(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every node computes the tree from the broker list, in its order (spec §2): a client
    started with the same brokers in another order computed another tree and never received
    a thing, with no word on either side. Sessions now exchange a digest of the list and the
    tree parameters (topology.wiring) and refuse a mismatch: one line on each side, per
    peer; the well-wired nodes keep working."""

    async def main() -> None:
        brokers = [f"127.0.0.1:{_free_port()}" for _ in range(3)]
        nodes = [
            Node("brokertree", listen=b, contact=brokers, key=KEY_TEXT, role="broker")
            for b in brokers
        ]
        for node in nodes:
            await node.start()
        try:
            subscriber = await Node("brokertree", contact=brokers, key=KEY_TEXT).start()
            publisher = await Node("brokertree", contact=brokers, key=KEY_TEXT).start()
            wrong = await Node("brokertree", contact=brokers[::-1], key=KEY_TEXT).start()
            nodes += [subscriber, publisher, wrong]
            quotes = await subscriber.subscribe("quotes", {"price": {"lt": 100}})
            await wrong.subscribe("quotes")
            delivery = None
            for _ in range(100):  # until the tree is up end to end
                receipt = await publisher.publish("quotes", "tick", attributes={"price": 99})
                assert receipt.accepted
                try:
                    delivery = await quotes.get(timeout=0.2)
                    break
                except TimeoutError:
                    continue
            assert delivery is not None and delivery.hops >= 1
            assert wrong.statistics().deliveries == 0
        finally:
            for node in reversed(nodes):
                await node.close()

    with caplog.at_level(logging.ERROR, logger="pubmesh.net"):
        asyncio.run(asyncio.wait_for(main(), 60))
    lines = [r.getMessage() for r in caplog.records if "broker list or tree other" in r.message]
    # the misordered client is told by the broker it dialed, and that broker of it
    assert any(": a broker with a broker list" in line for line in lines), lines
    assert any(": a client with a broker list" in line for line in lines), lines
    assert all("same brokers in the same order" in line for line in lines), lines
