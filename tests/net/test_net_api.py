"""The Python API (``pubmesh.api.Node``) on real sockets, and the example that documents it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pubmesh.api import Delivery, Lagged, Node
from pubmesh.errors import UserError
from pubmesh.net.runtime_stats import QueueStatistics
from support.netnode import KEY_TEXT, ROOT, node_env, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
ROLE = "supervisor" if STACK == "skipring" else "peer"


def test_subscribe_publish_and_iterate() -> None:
    async def main() -> None:
        async with (
            Node(STACK, listen="127.0.0.1:0", key=KEY_TEXT, role=ROLE) as contact,
            Node(STACK, listen="127.0.0.1:0", contact=contact.address, key=KEY_TEXT) as a,
            Node(STACK, listen="127.0.0.1:0", contact=contact.address, key=KEY_TEXT) as b,
        ):
            assert a.address.startswith("127.0.0.1:") and a.id > 0xFFFF
            news = await b.subscribe("news")
            also = await b.subscribe("news")  # a second subscription gets everything too
            await a.subscribe("news")
            for _ in range(100):
                if b.neighbors().get("news"):
                    break
                await asyncio.sleep(0.05)
            sent = {(await a.publish("news", f"item {i}")).pub_id for i in range(5)}
            got = {(await news.get(timeout=10)).pub_id for _ in range(5)}
            assert got == sent
            seen = []
            async for message in also:
                seen.append(message)
                if len(seen) == 5:
                    break
            assert {m.pub_id for m in seen} == sent
            assert {m.payload for m in seen} == {f"item {i}".encode() for i in range(5)}
            assert all(m.topic == "news" and m.hops >= 1 for m in seen)
            stats = b.statistics()
            assert stats.deliveries == 5
            assert stats.subscription_queues["news"] == QueueStatistics(pending=0, dropped=0)
            assert stats.protocol is not None and stats.protocol.delivered == 5
            await news.close()
            await also.close()
            assert "news" not in b.runtime.subscribed

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_slow_consumer_drops_its_oldest_deliveries_not_memory() -> None:
    async def main() -> None:
        async with (
            Node(STACK, listen="127.0.0.1:0", key=KEY_TEXT, role=ROLE, queue_size=3) as contact,
            Node(
                STACK, listen="127.0.0.1:0", contact=contact.address, key=KEY_TEXT, queue_size=3
            ) as node,
        ):
            sub = await node.subscribe("t")
            for _ in range(100):
                if node.neighbors().get("t"):
                    break
                await asyncio.sleep(0.05)
            ids = [(await node.publish("t", b"x")).pub_id for _ in range(10)]
            for _ in range(100):
                if node.statistics().deliveries >= 10:
                    break
                await asyncio.sleep(0.05)
            assert sub.pending() == 3 and sub.dropped == 7
            # what the queue holds counts in the node's memory budget
            assert sub.bytes == 3 and node.statistics().memory.used >= 3
            # the loss is said before what is left (iroh's Lagged), once
            assert await sub.get(timeout=1) == Lagged("t", 7)
            kept = [await sub.get(timeout=1) for _ in range(3)]
            assert [d.pub_id for d in kept if isinstance(d, Delivery)] == ids[-3:]
            assert sub.bytes == 0

    asyncio.run(asyncio.wait_for(main(), 60))


def test_bad_arguments_are_user_errors() -> None:
    with pytest.raises(UserError, match="unknown stack"):
        Node("nosuch", key=KEY_TEXT)
    with pytest.raises(UserError, match="listen"):
        Node(STACK, listen="0.0.0.0:7000", key=KEY_TEXT)
    with pytest.raises(UserError, match="key new"):
        Node(STACK, key=b"short")
    with pytest.raises(UserError, match="key new"):
        Node(STACK, key="a passphrase of some length")
    with pytest.raises(UserError, match="params"):
        Node(STACK, key=KEY_TEXT, params={"no_such_parameter": 1})


def test_stack_parameters_are_read_as_a_scenario_reads_them() -> None:
    """``params=`` goes through the stacks' one typed loader (the scenario's ``[stack.<name>]``
    and the CLI's ``--set`` too): a value of the wrong type, a name misspelt and a value the
    stack's own check refuses are each one UserError in the scenario's words; a mapping's
    values are converted to the declared types; a params dataclass still gets its check."""
    from pubmesh.proto.chord.params import ChordParams

    with pytest.raises(UserError, match=r"params for stack chord: succ_len: must be an integer"):
        Node("chord", key=KEY_TEXT, params={"succ_len": "three"})
    with pytest.raises(UserError, match=r"params for stack chord: succ_lem: unknown key"):
        Node("chord", key=KEY_TEXT, params={"succ_lem": 3})
    with pytest.raises(UserError, match=r"succ_len must be >= 0 \(0 = auto\), got -1"):
        Node("chord", key=KEY_TEXT, params={"succ_len": -1})
    with pytest.raises(UserError, match=r"succ_len must be >= 0 \(0 = auto\), got -1"):
        Node("chord", key=KEY_TEXT, params=ChordParams(succ_len=-1))
    with pytest.raises(UserError, match="a ChordParams or a mapping of its fields, not tuple"):
        Node("chord", key=KEY_TEXT, params=("succ_len", 3))
    node = Node("chord", key=KEY_TEXT, params={"succ_len": 5, "routing": "covering"})
    assert node.runtime.params == ChordParams(succ_len=5, routing="covering")


#: what the shell and the JSON channel refuse (tests/net/test_node_shell_content.py), which the
#: API refuses too, with the same words: (stack, call, the refusal's text)
REFUSED: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "gossip",
        "subscribe",
        {"filter": {"price": {"lt": 100}}},
        "stack gossip is topic-based: filters need a content-based stack such as chord",
    ),
    (
        "gossip",
        "publish",
        {"attributes": {"price": 1}},
        "stack gossip is topic-based: attributes need a content-based stack such as chord",
    ),
    (
        "chord",
        "subscribe",
        {"filter": {"price": {"below": 100}}},
        "subscribe: invalid filter: filter attribute 'price': unknown operator 'below'",
    ),
    ("chord", "subscribe", {"filter": [1]}, "filter must be a JSON object"),
    ("chord", "publish", {"attributes": {"price": [1, 2]}}, 'attribute "price" must be'),
    ("chord", "publish", {"attributes": {"$topic": "x"}}, "names starting with '$' are reserved"),
    ("chord", "publish", {"attributes": ["price", 1]}, "attributes must be a JSON object"),
]


def test_the_api_refuses_what_the_shell_refuses() -> None:
    """A filter on a topic-based stack, an invalid filter or bad attributes are a UserError
    at the call (gossip used to ignore the filter and deliver everything; chord accepted an
    invalid one and then delivered nothing), and nothing is subscribed or published."""

    async def main() -> None:
        async with (
            Node("gossip", listen="127.0.0.1:0", key=KEY_TEXT) as gossip,
            Node("chord", listen="127.0.0.1:0", key=KEY_TEXT) as chord,
        ):
            nodes = {"gossip": gossip, "chord": chord}
            for stack, call, arguments, words in REFUSED:
                node = nodes[stack]
                with pytest.raises(UserError) as refused:
                    if call == "subscribe":
                        await node.subscribe("quotes", **arguments)
                    else:
                        await node.publish("quotes", "tick", **arguments)
                assert words in str(refused.value), (stack, call, arguments, refused.value)
                assert not node.runtime.subscribed and node.statistics().published == 0
            # a topic is 1 to 255 bytes of UTF-8 (the wire bounds it there too: codec)
            for topic in ("", "é" * 128):
                with pytest.raises(UserError, match="a topic is 1 to 255 bytes of UTF-8"):
                    await gossip.publish(topic, "tick")
                with pytest.raises(UserError, match="a topic is 1 to 255 bytes of UTF-8"):
                    await gossip.subscribe(topic)
            assert not gossip.runtime.subscribed and gossip.statistics().published == 0
            assert (await gossip.publish("ü" * 127, "tick")).accepted  # 254 bytes: allowed
            # what is valid still works
            await chord.subscribe("quotes", {"price": {"lt": 100}})
            receipt = await chord.publish("quotes", "tick", attributes={"price": 99.5})
            assert receipt.accepted and chord.runtime.subscribed["quotes"][1] == {
                "price": {"lt": 100}
            }

    asyncio.run(asyncio.wait_for(main(), 60))


def run_example(name: str, stack: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python examples/NAME --stack STACK`` as the README runs it; it must exit 0."""
    command = [sys.executable, str(ROOT / "examples" / name), "--stack", stack]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=node_env(), cwd=cwd
    )
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stderr}"
    return result


@pytest.mark.parametrize("stack", real_stacks())
def test_the_api_example_runs_on_every_stack(stack: str, tmp_path: Path) -> None:
    """examples/api_example.py, as the README runs it, on every stack: brokertree's needs two
    brokers that know each other (Node.start(boot=False), then boot), skipring's a
    supervisor (it ended in a TimeoutError traceback on brokertree before)."""
    result = run_example("api_example.py", stack, tmp_path)
    assert result.stdout.count("bob got [news]") == 3, result.stdout
    # neighbours by topic; an overlay every topic shares (brokertree, chord) under "*", not
    # under an empty name
    assert "bob's neighbours: {" in result.stdout and "{''" not in result.stdout, result.stdout
    if stack in ("brokertree", "chord"):
        assert "bob's neighbours: {'*': ['127.0.0.1:" in result.stdout, result.stdout


@pytest.mark.parametrize("stack", ["chord", "brokertree"])
def test_the_content_example_delivers_only_what_each_filter_matches(
    stack: str, tmp_path: Path
) -> None:
    """examples/content_example.py (README §4): of four quotes, bob's filter (s3 under 100)
    matches two and carol's (every s3) three, and each gets exactly those."""
    if stack not in real_stacks():
        pytest.fail(f"{stack} is not in this build: {real_stacks()}")
    result = run_example("content_example.py", stack, tmp_path)
    got = sorted(line for line in result.stdout.splitlines() if " got " in line)
    assert got == sorted(
        [
            "bob got 's3 at 99.5' {'symbol': 's3', 'price': 99.5}",
            "bob got 's3 at 7.25' {'symbol': 's3', 'price': 7.25}",
            "carol got 's3 at 99.5' {'symbol': 's3', 'price': 99.5}",
            "carol got 's3 at 120.0' {'symbol': 's3', 'price': 120.0}",
            "carol got 's3 at 7.25' {'symbol': 's3', 'price': 7.25}",
        ]
    ), result.stdout
    assert "bob: 2 deliveries" in result.stdout and "carol: 3 deliveries" in result.stdout


def test_a_node_with_a_data_directory_comes_back_as_itself(tmp_path: Path) -> None:
    """``Node(data_dir=...)``: closed and made again on the directory, the node has its
    address and its subscriptions back (pubmesh.net.store; the processes' test, with SIGKILL,
    is tests/net/test_net_store.py)."""

    async def main() -> None:
        data = tmp_path / "data"
        async with Node(STACK, key=KEY_TEXT, role=ROLE, data_dir=data) as first:
            await first.subscribe("news")
            address = first.address
        async with Node(STACK, key=KEY_TEXT, role=ROLE, data_dir=data) as again:
            assert again.address == address
            assert "news" in again.runtime.subscribed
            assert again.statistics().store is not None

    asyncio.run(asyncio.wait_for(main(), 60))
