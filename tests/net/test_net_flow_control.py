"""Flow control with feedback: receipts, Block and Drop, slow peers cut.

Real sockets and a real process: the publisher is a :class:`pubmesh.Node` in this process, its
one neighbour a ``pubmesh node`` process subscribed to the same topic, then stopped (SIGSTOP)
so that it reads nothing while its kernel buffers and then the publisher's queue to it fill.
The publisher's heartbeat deadline is set far away (``suspect_after`` 60 s), so what happens is
flow control's doing, not failure detection's. Checked, in order:

* a ``Congestion.DROP`` publication is refused, not queued, once the queue to the stopped peer
  has no room, and the receipt names the slow peer; nothing was dropped at the queue itself;
* a ``Congestion.BLOCK`` publication with a timeout waits that long, then is refused;
* the peer is reported slow once (``net.slow-peer``) after ``slow_after`` and disconnected
  (``slow-peer``) after ``slow_disconnect``, as NATS cuts a slow consumer;
* a ``BLOCK`` publication without a timeout, offered while the queue is full, waits until the
  cut frees it and is then accepted;
* the JSON control channel answers a publish it has no room for with ``"refused": "no-room"``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from pubmesh.api import Congestion, Node, Receipt
from pubmesh.net.transport import NetConfig
from support.netnode import KEY_TEXT, NodeProcess, publish_until_delivered, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
TOPIC = "flow"
CHUNK = 32 * 1024
SLOW_AFTER, SLOW_DISCONNECT, TICK = 0.5, 3.0, 0.5

pytestmark = pytest.mark.xdist_group("net_flow_control")


def _subscriber(contact: str | None, log: Path) -> NodeProcess:
    """A ``pubmesh node`` process subscribed to TOPIC, joined through ``contact``."""
    joined = ["--contact", contact] if contact is not None else []
    return NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0", *joined, "--subscribe", TOPIC], log=log
    )


def test_a_stopped_peer_makes_publishers_wait_or_refuse_and_is_then_cut(tmp_path: Path) -> None:
    config = NetConfig(
        max_queue_bytes=1 << 20,
        slow_after=SLOW_AFTER,
        slow_disconnect=SLOW_DISCONNECT,
        suspect_after=60.0,
        tick=TICK,
    )
    events: list[tuple[float, str, dict[str, Any]]] = []

    async def main() -> None:
        async with Node(
            STACK, listen="127.0.0.1:0", key=KEY_TEXT, config=config, congestion="drop"
        ) as publisher:
            publisher.runtime.event_callbacks.append(
                lambda kind, detail: events.append((time.monotonic(), kind, dict(detail)))
            )
            await publisher.subscribe(TOPIC)
            slow = _subscriber(publisher.address, tmp_path / "slow.log")
            try:
                await _flow(publisher, slow)
            finally:
                os.kill(slow.proc.pid, signal.SIGCONT)
                slow.stop()

    async def _flow(publisher: Node, slow: NodeProcess) -> None:
        # the swarm has formed: the peer delivers what is published
        deadline = time.monotonic() + 30
        while True:
            probe = await publisher.publish(TOPIC, b"probe")
            await asyncio.sleep(0.2)
            if probe.pub_id in slow.deliveries():
                break
            assert time.monotonic() < deadline, "the peer never delivered a probe"

        os.kill(slow.proc.pid, signal.SIGSTOP)
        accepted = 0
        refused: Receipt | None = None
        for _ in range(4000):  # 125 MB: far more than loopback's buffers and the queue hold
            receipt = await publisher.publish(TOPIC, b"x" * CHUNK)
            if not receipt:
                refused = receipt
                break
            accepted += 1
            await asyncio.sleep(0)  # the loop writes what was queued
        full_at = time.monotonic()
        assert refused is not None, f"{accepted} publications of {CHUNK} bytes all accepted"
        assert refused.pub_id is None and refused.waited == 0.0, refused
        assert refused.reason is not None and "(a slow peer)" in refused.reason, refused
        assert slow.address in refused.reason, refused
        stats = publisher.statistics()
        assert stats.refused == {"no-room": 1}, stats.refused
        assert "queue-full" not in stats.transport.dropped, stats.transport.dropped

        # Block with a timeout: waits it out, then is refused
        waited = await publisher.publish(TOPIC, b"w" * CHUNK, congestion="block", timeout=0.3)
        assert not waited and 0.3 <= waited.waited < 0.3 + 0.2, waited

        # Block without one: waits until the slow peer is cut, then goes out
        block_from = time.monotonic()
        blocked = await publisher.publish(TOPIC, b"b" * CHUNK, congestion=Congestion.BLOCK)
        cut_at = time.monotonic()
        assert blocked.accepted and blocked.pub_id is not None, blocked
        slow_events = [(t, d) for t, kind, d in events if kind == "net.slow-peer"]
        assert [d["peer"] for _, d in slow_events] == [slow.node_id], events
        cuts = [
            (t, d) for t, kind, d in events
            if kind == "net.rejected" and d["reason"] == "slow-peer"
        ]  # fmt: skip
        assert [d["peer"] for _, d in cuts] == [slow.node_id], events
        # the queue went over half full before it refused, so the report came within
        # slow_after (+ a tick) of the refusal and the cut within slow_disconnect (+ a tick)
        assert slow_events[0][0] - full_at <= SLOW_AFTER + TICK + 0.5, (slow_events, full_at)
        assert cuts[0][0] - full_at <= SLOW_DISCONNECT + TICK + 0.5, (cuts, full_at)
        assert cuts[0][0] <= cut_at, "the blocked publication went out before the cut"
        assert blocked.waited >= cuts[0][0] - block_from, (blocked, cuts, block_from)
        assert publisher.statistics().transport.slow_peers == 1
        print(
            f"flow control: {accepted} publications of {CHUNK} bytes accepted, then refused; "
            f"slow {slow_events[0][0] - full_at:.2f} s and cut {cuts[0][0] - full_at:.2f} s "
            f"after; BLOCK waited {blocked.waited:.2f} s"
        )

    asyncio.run(asyncio.wait_for(main(), 120))


def test_the_control_channel_answers_a_publish_without_room_refused(tmp_path: Path) -> None:
    """A node process (JSON mode) whose peer is stopped: its publish answers turn from ok to
    ``"ok": false, "refused": "no-room"`` naming the slow peer, and the node keeps answering
    (all within the 5 s its heartbeat gives the silent peer)."""
    first = _subscriber(None, tmp_path / "publisher.log")
    second = _subscriber(first.address, tmp_path / "stopped.log")
    try:
        publish_until_delivered(first, [second], TOPIC, 30)
        os.kill(second.proc.pid, signal.SIGSTOP)
        answers = []
        for _ in range(2000):  # 128 MB of workload payloads: more than buffers and queue
            answer = first.command({"op": "publish", "topic": TOPIC, "payload_size": 64 * 1024})
            answers.append(answer)
            if not answer["ok"]:
                break
        last = answers[-1]
        assert not last["ok"] and last["refused"] == "no-room", last
        assert "publish refused" in last["error"] and second.address in last["error"], last
        assert all(a["ok"] for a in answers[:-1]) and len(answers) > 1, len(answers)
        stats = first.command({"op": "stats"})["stats"]  # still serving its controller
        assert stats["refused"] == {"no-room": 1}, stats["refused"]
    finally:
        os.kill(second.proc.pid, signal.SIGCONT)
        for node in (first, second):
            node.stop()


def test_a_blocked_publication_wakes_when_the_queue_drains_without_polling() -> None:
    """``BLOCK`` awaits room: the publisher's queue to a neighbour that stopped reading fills
    (the neighbour is a second node in this process whose sockets stop being read), a
    ``BLOCK`` publication waits, and it goes out once the neighbour reads again and the queue
    drains below asyncio's low-water mark, woken by the transport (``resume_writing``). It
    looks for room a few times, where a poll every 5 ms would have looked ~100 times."""
    # the queue to the peer is what fills, not the memory budget (the publisher's caches and
    # its own subscription's queue keep what it publishes)
    config = NetConfig(max_queue_bytes=256 * 1024, memory_budget=1 << 30, suspect_after=60.0)
    stalled = 0.5

    async def main() -> None:
        async with (
            Node(STACK, listen="127.0.0.1:0", key=KEY_TEXT, config=config) as publisher,
            Node(STACK, listen="127.0.0.1:0", contact=publisher.address, key=KEY_TEXT) as peer,
        ):
            got = await peer.subscribe(TOPIC)
            await publisher.subscribe(TOPIC)
            began = time.monotonic()
            while not peer.neighbors().get(TOPIC):  # the swarm has formed
                assert time.monotonic() - began < 30, "the peer never joined the swarm"
                await asyncio.sleep(0.05)
            probe = await publisher.publish(TOPIC, b"probe")
            assert (await got.get(timeout=10)).pub_id == probe.pub_id
            print(f"swarm formed in {time.monotonic() - began:.2f} s")
            links = [c.transport for c in peer.runtime.transport.connections]
            assert links and all(link is not None for link in links)
            for link in links:
                link.pause_reading()
            sent = 0
            while sent < 4000:
                receipt = await publisher.publish(TOPIC, b"x" * CHUNK, congestion="drop")
                if not receipt:
                    break
                sent += 1
                await asyncio.sleep(0)
            assert not receipt, f"{sent} publications of {CHUNK} bytes all accepted"
            assert receipt.reason is not None and "(a slow peer)" in receipt.reason, receipt

            looks = 0
            room = publisher.runtime.room

            def counted(topic: str, payload: bytes) -> str | None:
                nonlocal looks
                looks += 1
                return room(topic, payload)

            publisher.runtime.room = counted  # type: ignore[method-assign]
            blocked = asyncio.create_task(
                publisher.publish(TOPIC, b"b" * CHUNK, congestion="block", timeout=20)
            )
            await asyncio.sleep(stalled)
            assert not blocked.done(), blocked
            looked_while_stalled = looks
            resumed = time.monotonic()
            for link in links:
                link.resume_reading()  # type: ignore[union-attr]
            receipt = await blocked
            assert receipt.accepted, receipt
            assert receipt.waited >= stalled, receipt
            assert time.monotonic() - resumed < 2.0, "woken long after the queue drained"
            assert looked_while_stalled <= 20, (looked_while_stalled, "a poll, not a wake-up")
            print(
                f"BLOCK: {sent} publications filled the queue; the blocked one waited "
                f"{receipt.waited:.2f} s, looked for room {looked_while_stalled} times while "
                f"the peer read nothing and {looks} in all"
            )

    asyncio.run(asyncio.wait_for(main(), 90))
