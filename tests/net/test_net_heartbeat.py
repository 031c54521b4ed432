"""A hung peer is declared down, and taken back when it answers.

Before, a peer stopped with SIGSTOP was never declared down: its kernel kept acknowledging
bytes, TCP saw nothing wrong, and publications to it were dropped silently. Now every open
connection that has sent nothing for a second sends a PING, and one that has heard nothing for
``suspect_after`` (5 s) is lost like a reset one (:mod:`pubmesh.net.transport`, failure
detection). Two live node processes: the peer is stopped, the contact declares it down within
the bound, the peer is continued, and publications reach it again.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from support.netnode import publish_until_delivered, real_stacks, small_cluster

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
SUSPECT_AFTER = 5.0  # NetConfig's default
PING_INTERVAL = 1.0
TICK = 0.5

pytestmark = pytest.mark.xdist_group("net_heartbeat")


def test_a_stopped_peer_is_declared_down_within_suspect_after_and_taken_back(
    tmp_path: Path,
) -> None:
    contact, peer = small_cluster(STACK, 1, tmp_path)
    try:
        for node in (contact, peer):
            assert node.command({"op": "subscribe", "topic": "hb"})["ok"]
        publish_until_delivered(contact, [peer], "hb", 20, "no delivery before the stop")
        before = contact.mark()
        os.kill(peer.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        down = contact.wait_event(
            lambda r: (
                r.get("event") == "net"
                and r["kind"] == "net.peer-down"
                and r["detail"]["address"] == peer.address
            ),
            SUSPECT_AFTER + 10,
            "the stopped peer declared down",
            before,
        )
        took = time.monotonic() - stopped
        # heard last at most a ping interval before the stop; checked every tick
        low, high = SUSPECT_AFTER - PING_INTERVAL - TICK, SUSPECT_AFTER + TICK + 1.0
        assert low <= took <= high, f"declared down {took:.1f} s after the stop: {down}"
        print(f"a stopped peer was declared down {took:.2f} s after SIGSTOP")
        silent = [
            r["detail"]
            for r in contact.records[before:]
            if r.get("event") == "net"
            and r["kind"] == "net.rejected"
            and r["detail"]["reason"] == "peer-silent"
        ]
        assert silent and "nothing received for" in silent[0]["detail"], silent
        os.kill(peer.proc.pid, signal.SIGCONT)
        publish_until_delivered(contact, [peer], "hb", 30, "the continued peer got nothing")
    finally:
        os.kill(peer.proc.pid, signal.SIGCONT)
        peer.stop()
        contact.stop()
