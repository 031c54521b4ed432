"""One member cannot eclipse a node through HyParView.

The attack as it was found: a member joins the target's swarm over its own link, then sends
twenty ``ForwardJoin`` messages a second with ``ttl = 0``, each naming one of 40 silent
addresses. The paper's rule adds each named id to the active view (evicting a neighbour when
full); before, within seconds all of the target's active neighbours were fake, only 32 of its
172 publications reached the other nodes, and it opened 184 TLS connections to ports the
member chose. Now a named id is invited and enters only when it asks for the link itself, an
invitation per member is rate-limited, and an id that failed is not tried again for
``failed_memory`` (:meth:`pubmesh.proto.gossip.hyparview.HyParView._invite`).

Real processes: a contact and three members, the target among them; the insider's link is
the test's own (tests/support/insider.py). The target publishes five a second throughout.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from pubmesh.net.address import format_id, node_id
from pubmesh.net.identity import init_authority, issue
from pubmesh.proto.gossip.hyparview import ForwardJoin, Join
from support.identity import STACK, free_port, identity_node
from support.insider import insider_link
from support.netnode import NodeProcess, publish_until_delivered

pytestmark = [
    pytest.mark.xdist_group("net_eclipse"),
    pytest.mark.skipif(STACK != "gossip", reason="HyParView's ForwardJoin"),
]

ATTACK_SECONDS = 6.0


def _silent_addresses(count: int) -> list[int]:
    """Node ids of loopback ports nothing listens on (bound, then closed)."""
    ids = []
    for _ in range(count):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ids.append(node_id("127.0.0.1", sock.getsockname()[1]))
    return ids


def _view(node: NodeProcess) -> list[int]:
    view: list[int] = node.command({"op": "neighbors"})["neighbors"].get("news", [])
    return view


def test_a_member_naming_silent_ids_cannot_take_the_targets_view(tmp_path: Path) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    contact = identity_node(tmp_path, authority, "contact")
    members = [identity_node(tmp_path, authority, f"m{i}", contact) for i in range(2)]
    target = identity_node(tmp_path, authority, "target", contact)
    honest = [contact, *members, target]
    insider = issue(authority, f"127.0.0.1:{free_port()}", tmp_path / "insider")
    fakes = _silent_addresses(40)
    try:
        for node in honest:
            assert node.command({"op": "subscribe", "topic": "news"})["ok"]
        others = [contact, *members]
        publish_until_delivered(target, others, "news", 30)
        before = _view(target)
        assert before, "the target has no neighbour"
        mark = target.mark()
        published: list[int] = []
        with insider_link(tmp_path / "insider", insider.node, target.address) as send:
            send([(Join(topic="news"), None, False)])
            started = time.monotonic()
            sent = 0
            while time.monotonic() - started < ATTACK_SECONDS:
                fake = fakes[sent % len(fakes)]
                send([(ForwardJoin(topic="news", new_node=fake, ttl=0), None, False)])
                sent += 1
                if sent % 4 == 0:
                    published.append(
                        target.command({"op": "publish", "topic": "news", "payload": "t"})["pub_id"]
                    )
                time.sleep(0.05)
            during = _view(target)
        time.sleep(2.0)
        after = _view(target)
        assert not set(during) & set(fakes), f"fake ids in the view: {during}"
        assert not set(after) & set(fakes), f"fake ids in the view: {after}"
        kept = [n for n in before if n in during]
        assert kept == before, f"honest neighbours evicted: {before} -> {during}"
        # every publication of the target reached every other member
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all(set(published) <= node.deliveries() for node in others):
                break
            time.sleep(0.2)
        for node in others:
            got = len(set(published) & node.deliveries())
            assert got == len(published), f"{node.address}: {got} of {len(published)} delivered"
        # the target invited a few of the named ids, not one per message: a dial to a silent
        # id shows as a peer-down line, or (once the node has said it cannot reach it) as its
        # one net.trouble line
        fake_addresses = {format_id(f) for f in fakes}
        dialed = {
            r["detail"]["address"]
            for r in target.records[mark:]
            if r.get("event") == "net"
            and r["kind"] in ("net.peer-down", "net.trouble")
            and r["detail"]["address"] in fake_addresses
        }
        stats = target.command({"op": "stats"})["stats"]
        troubled = {t["address"] for t in stats["troubles"]} & fake_addresses
        assert troubled <= dialed, (troubled, dialed)  # every one dialed shows in the lines
        assert sent >= 100 and len(dialed) <= 3, f"{len(dialed)} silent ids dialed of {sent}"
    finally:
        for node in honest:
            node.stop()
