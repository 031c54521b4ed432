"""The transport and node runtime on real loopback sockets, with the test-only nettest stack:
handshake, delivery, failure detection, graceful close, bounded queues, reconnects, timers and
the partial trace."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from pubmesh.net.address import node_id
from pubmesh.net.cluster.gather import read_table
from pubmesh.net.connection import State
from pubmesh.net.runtime import NodeRuntime
from pubmesh.net.tracing import segments
from pubmesh.net.transport import NetConfig
from pubmesh.proto.core import Deliver
from support.netnode import FAST, OTHER_KEY, stack_of, start_node, wait_for
from support.probestacks import NetTestParams, ProbeFlood


def run(coroutine: object) -> None:
    asyncio.run(asyncio.wait_for(coroutine, 30))  # type: ignore[arg-type]


def collect(node: NodeRuntime) -> list[Deliver]:
    got: list[Deliver] = []
    node.delivery_callbacks.append(lambda d, t: got.append(d))
    return got


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_publications_flood_to_every_subscriber_over_tcp() -> None:
    async def main() -> None:
        hub = await start_node()
        leaves = [await start_node((hub.node_id,)) for _ in range(4)]
        received = [collect(n) for n in leaves]
        for n in leaves:
            n.subscribe("news")
        await wait_for(lambda: len(stack_of(hub).peers) == 4, what="all joined")
        ids = [leaves[0].publish("news", f"p{i}".encode()) for i in range(20)]
        await wait_for(lambda: all(len(r) == 20 for r in received), what="deliveries")
        for got in received:
            assert sorted(d.pub_id for d in got) == sorted(ids)
        assert {d.payload for d in received[3]} == {f"p{i}".encode() for i in range(20)}
        assert hub.statistics().transport.rejected == {}
        for n in [*leaves, hub]:
            await n.close()

    run(main())


def test_node_ids_are_the_listening_addresses() -> None:
    async def main() -> None:
        port = free_port()
        node = await start_node(listen=("127.0.0.1", port))
        assert node.node_id == node_id("127.0.0.1", port)
        await node.close()

    run(main())


def test_a_killed_peer_is_reported_down_and_a_graceful_one_is_not() -> None:
    async def main() -> None:
        hub = await start_node()
        crasher = await start_node((hub.node_id,))
        leaver = await start_node((hub.node_id,))
        await wait_for(lambda: len(stack_of(hub).peers) == 2, what="joined")
        await wait_for(
            lambda: (
                hub.transport is not None
                and hub.transport.connected(crasher.node_id)
                and hub.transport.connected(leaver.node_id)
            ),
            what="connections",
        )
        # graceful: the hub releases the leaver (as on a protocol Disconnect) -> no PeerDown
        stack_of(hub).peers.discard(leaver.node_id)
        assert hub.transport is not None
        hub.transport.release(leaver.node_id)
        await wait_for(lambda: not hub.transport.connected(leaver.node_id), what="release")
        await asyncio.sleep(0.2)
        assert stack_of(hub).downs == []
        assert stack_of(leaver).downs == []
        # crash: connections reset without goodbye -> PeerDown at the hub
        assert crasher.transport is not None
        crasher.closed = True
        for conn in list(crasher.transport.connections):
            conn.abort()
        crasher.transport.closed = True
        await wait_for(lambda: stack_of(hub).downs == [crasher.node_id], what="peer down")
        assert hub.statistics().peer_down_notices == 1
        await hub.close()
        await leaver.close()

    run(main())


def test_sending_to_a_dead_address_reports_the_peer_down_after_backoff() -> None:
    async def main() -> None:
        node = await start_node()
        dead = node_id("127.0.0.1", free_port())
        stack_of(node).peers.add(dead)
        loop = asyncio.get_running_loop()
        started = loop.time()
        node.publish("t", b"x")
        await wait_for(lambda: stack_of(node).downs == [dead], what="unreachable")
        elapsed = loop.time() - started
        # three attempts, backoff 0.02 then 0.04 s: well under a second on loopback
        assert elapsed < 1.0
        stats = node.statistics().transport
        assert stats.dropped == {"unreachable": 1}
        assert stats.dials_failed == FAST.dial_attempts
        await node.close()

    run(main())


def test_dialing_retries_until_the_peer_starts_listening() -> None:
    async def main() -> None:
        port = free_port()
        config = NetConfig(dial_attempts=6, backoff_initial=0.05, backoff_max=0.2, tick=0.1)
        sender = await start_node(config=config)
        target = node_id("127.0.0.1", port)
        stack_of(sender).peers.add(target)
        sender.publish("t", b"early")
        await asyncio.sleep(0.12)
        late = await start_node(listen=("127.0.0.1", port))
        late.subscribe("t")
        got = collect(late)
        # the flood was queued while dialing; it is delivered once a retry connects
        await wait_for(lambda: len(got) == 1, what="delivery after retry")
        assert got[0].payload == b"early"
        assert stack_of(sender).downs == []
        await sender.close()
        await late.close()

    run(main())


def test_a_peer_with_another_key_is_refused_both_ways() -> None:
    async def main() -> None:
        honest = await start_node()
        said: dict[str, list[str]] = {"honest": [], "stranger": []}
        honest.event_callbacks.append(
            lambda kind, detail: said["honest"].append(str(detail.get("detail")))
        )
        stranger = await start_node((honest.node_id,), key=OTHER_KEY, boot=False)
        stranger.event_callbacks.append(
            lambda kind, detail: said["stranger"].append(str(detail.get("detail")))
        )
        stranger.boot()
        # the stranger dials the honest node: it proves first, the honest node refuses the
        # proof and says so (REFUSED); both count auth-failed, and the stranger reports the
        # peer unreachable
        await wait_for(lambda: stack_of(stranger).downs == [honest.node_id], what="refused")
        # each side says the keys differ, names its own key's fingerprint and where it came
        # from, and what to do (not "the peer does not hold the key": either may be wrong)
        for side, node in (("honest", honest), ("stranger", stranger)):
            key = node.key
            assert key is not None
            lines = [line for line in said[side] if "the cluster keys differ" in line]
            assert lines, said[side]
            assert all(key.fingerprint in line and key.source in line for line in lines), lines
            assert all("needs the same key" in line for line in lines), lines
        assert honest.key is not None and stranger.key is not None
        assert honest.key.fingerprint != stranger.key.fingerprint
        assert stranger.statistics().transport.rejected.get("auth-failed", 0) >= 1
        assert honest.statistics().transport.rejected.get("auth-failed", 0) >= 1
        # ... and the honest node, dialing the stranger, is refused the same way
        before = honest.statistics().transport.rejected.get("auth-failed", 0)
        stack_of(honest).peers.add(stranger.node_id)
        honest.publish("t", b"secret")
        await wait_for(lambda: stack_of(honest).downs == [stranger.node_id], what="refused")
        assert honest.statistics().transport.rejected.get("auth-failed", 0) > before
        assert stack_of(stranger).seen == set()
        await honest.close()
        await stranger.close()

    run(main())


def test_send_queues_are_bounded_for_a_peer_that_stops_reading() -> None:
    async def main() -> None:
        limit = 256 * 1024
        config = NetConfig(max_queue_bytes=limit, tick=0.1)
        sender = await start_node(config=config)
        slow = await start_node((sender.node_id,), config=config)
        await wait_for(lambda: len(stack_of(sender).peers) == 1, what="joined")
        assert slow.transport is not None
        for conn in slow.transport.connections:
            assert conn.transport is not None
            conn.transport.pause_reading()
        payload = bytes(1000)
        for i in range(20_000):  # 20 MB offered to a peer that reads nothing
            sender.transport.send(  # type: ignore[union-attr]
                slow.node_id,
                ProbeFlood(topic="t", pub_id=i, hops=0, payload=payload),
                0.0,
            )
            if i % 500 == 0:
                await asyncio.sleep(0)
        assert sender.transport is not None
        (conn,) = [c for c in sender.transport.connections if c.peer == slow.node_id]
        assert conn.backlog() <= limit
        drops = sender.statistics().transport.dropped
        sent = sender.statistics().transport.frames_sent
        assert drops["queue-full"] > 10_000
        assert sent + drops["queue-full"] >= 20_000
        # the slow peer is still connected: dropping is not a failure
        assert conn.state is State.OPEN
        await sender.close()
        await slow.close()

    run(main())


def test_timers_fire_through_the_event_loop() -> None:
    async def main() -> None:
        hub = await start_node()
        pinger = await start_node((hub.node_id,), params=NetTestParams(ping_interval=0.05))
        await wait_for(lambda: stack_of(hub).pings_received >= 5, what="periodic pings")
        await pinger.close()
        await hub.close()

    run(main())


def test_partial_trace_records_deliveries_messages_and_rejections(tmp_path: Path) -> None:
    async def main() -> None:
        hub = await start_node(trace_dir=tmp_path / "hub", segment_seconds=0.2)
        leaf = await start_node((hub.node_id,), trace_dir=tmp_path / "leaf")
        hub.subscribe("t")
        await wait_for(lambda: len(stack_of(hub).peers) == 1, what="joined")
        pub = leaf.publish("t", b"hello")
        await wait_for(lambda: hub.deliveries == 1, what="delivery")
        # a stranger without the key knocks
        stranger = await start_node((hub.node_id,), key=OTHER_KEY)
        await wait_for(lambda: stack_of(stranger).downs != [], what="refusal")
        await asyncio.sleep(0.3)
        for node in (leaf, hub, stranger):
            await node.close()
        return pub

    pub_id = asyncio.run(main())
    hub_segments = segments(tmp_path / "hub")
    assert hub_segments, "the hub wrote no segment"
    # a segment holds the tables that got rows: read them as the gatherer does
    deliveries = read_table([tmp_path / "hub"], "deliveries")
    assert [row["pub_id"] for row in deliveries] == [pub_id]
    kinds = [row["kind"] for row in read_table([tmp_path / "hub"], "events")]
    assert "net.rejected" in kinds
    assert segments(tmp_path / "leaf"), "the leaf wrote no segment"
    messages = read_table([tmp_path / "leaf"], "messages")
    flood = [row for row in messages if row["type"] == "ProbeFlood"]
    assert len(flood) == 1 and flood[0]["t_recv"] is None and flood[0]["pub_id"] == pub_id
