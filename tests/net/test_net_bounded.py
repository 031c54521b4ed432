"""Everything a member can make a node hold is bounded and counted.

Each test floods one structure over a member's own link, with a valid identity, and reads the
target's resident memory (``VmRSS``) and its memory budget's ``used`` before and after:

* the gossip contact's swarm directory (:class:`pubmesh.proto.gossip.hyparview.SwarmDirectory`):
  100,000 ContactRequests for distinct topics. Before, +40 MiB of resident memory, none of it
  in ``used``, kept for good; now one member holds a place in ``directory_per_node`` (256)
  topics and the directory's bound is counted;
* topics of any length: a ContactRequest naming a topic of 100 KiB. Before, kept whole
  (+104 MiB for 100 MiB sent); now a malformed frame, the link closed and its sender charged;
* a link's map of publishers' certificates: signed frames each bringing a certificate the
  authority did not sign. Before, 65,535 of them kept per link; now none is kept, and the
  sender is cut off after ``max_invalid``.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from pubmesh.net.identity import init_authority, issue, load_identity, signing_key
from pubmesh.net.signing import Signer, Verifier, credential_of
from pubmesh.net.transport import NetConfig
from pubmesh.proto.gossip.hyparview import ContactRequest
from pubmesh.proto.gossip.plumtree import Gossip
from support.identity import STACK, free_port, identity_node
from support.insider import insider_link
from support.netnode import NodeProcess

pytestmark = [
    pytest.mark.xdist_group("net_bounded"),
    pytest.mark.skipif(STACK != "gossip", reason="the gossip contact's directory"),
]

MIB = 1 << 20


def _rss(node: NodeProcess) -> int:
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _used(node: NodeProcess) -> int:
    used: int = node.command({"op": "stats"})["stats"]["memory"]["used"]
    return used


def _closed(send: object, probe: list[object]) -> bool:
    """Whether the node closed the link: a send fails within a few tries."""
    for _ in range(20):
        try:
            send(probe)  # type: ignore[operator]
        except OSError:
            return True
        time.sleep(0.1)
    return False


def test_a_flood_of_topics_at_the_contact_is_bounded_and_counted(tmp_path: Path) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    contact = identity_node(tmp_path, authority, "contact")
    insider = issue(authority, f"127.0.0.1:{free_port()}", tmp_path / "insider")
    try:
        assert contact.command({"op": "subscribe", "topic": "news"})["ok"]
        time.sleep(0.5)
        rss0, used0 = _rss(contact), _used(contact)
        with insider_link(tmp_path / "insider", insider.node, contact.address) as send:
            for batch in range(100):
                send([(ContactRequest(topic=f"t{batch}.{i}"), None, False) for i in range(1000)])
            time.sleep(1.0)
        stats = contact.command({"op": "stats"})["stats"]
        grown, used = _rss(contact) - rss0, stats["memory"]["used"]
        print(
            f"100,000 topics: resident +{grown / MIB:.1f} MiB, used +{(used - used0) / MIB:.2f} MiB"
        )
        assert grown < 12 * MIB, f"resident memory grew {grown / MIB:.1f} MiB for 100,000 topics"
        assert 0 < used - used0 < 12 * MIB and used < stats["memory"]["budget"], (used0, used)
        # a topic of 100 KiB is a malformed frame: the link is closed
        with insider_link(tmp_path / "insider", insider.node, contact.address) as send:
            send([(ContactRequest(topic="x" * (100 << 10)), None, False)])
            assert _closed(send, [(ContactRequest(topic="y"), None, False)]), "link kept"
        stats = contact.command({"op": "stats"})["stats"]
        assert stats["transport"]["rejected"].get("topic-too-long") == 1, stats["transport"]
        assert _rss(contact) - rss0 < 12 * MIB
        # the contact still serves its honest members
        member = identity_node(tmp_path, authority, "member", contact)
        try:
            assert member.command({"op": "subscribe", "topic": "news"})["ok"]
            deadline = time.monotonic() + 20
            while "news" not in member.command({"op": "neighbors"})["neighbors"]:
                assert time.monotonic() < deadline, "the member never joined the swarm"
                time.sleep(0.2)
        finally:
            member.stop()
    finally:
        contact.stop()


def test_refused_certificates_are_not_kept_and_their_sender_is_cut_off(tmp_path: Path) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    init_authority(tmp_path / "other-ca")
    node = identity_node(tmp_path, authority, "node")
    insider = issue(authority, f"127.0.0.1:{free_port()}", tmp_path / "insider")
    # certificates of another authority, each valid in form: the node refuses every one
    strangers = [
        issue(tmp_path / "other-ca", f"127.0.0.1:{7000 + i}", tmp_path / f"s{i}") for i in range(3)
    ]
    try:
        assert node.command({"op": "subscribe", "topic": "news"})["ok"]
        frames = []
        for i, identity in enumerate(strangers * 10):
            signer = Signer(
                identity.node,
                signing_key(load_identity(tmp_path / f"s{i % 3}")),
                credential_of(identity.certificate, identity.node),
            )
            message = Gossip(topic="news", pub_id=signer.new_pub_id(), round=0, payload=b"x")
            signed = Verifier(signer).signature(message)
            assert signed is not None
            frames.append((message, signed, True))
        with insider_link(tmp_path / "insider", insider.node, node.address) as send:
            with contextlib.suppress(OSError):
                for frame in frames:
                    send([frame])
                    time.sleep(0.01)
            assert _closed(send, [frames[0]]), "the sender of refused certificates kept its link"
        stats = node.command({"op": "stats"})["stats"]
        assert stats["transport"]["bans"] == 1, stats["transport"]
        limit = NetConfig().max_invalid
        refused = sum(stats["forged"].values())
        assert refused <= limit, f"{refused} copies checked after {limit} invalid ones: {stats}"
    finally:
        node.stop()
