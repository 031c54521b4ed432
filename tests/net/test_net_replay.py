"""Fresh signatures: a member that captured a genuine signed publication
cannot get it delivered a second time, anywhere (:mod:`pubmesh.net.signing`, fresh
signatures).

The insider is a member with a valid identity: it joins the publisher's gossip swarm over its
own link (a HyParView Join, as any member may), receives the publication the way every
neighbour does, signature and certificate included, and sends that copy again once the
gossip layer has forgotten the id (``id_retention`` set to 2 s here, 90 s by default): to
the subscriber, to the publisher itself, to a node started after the publication, and to the
subscriber started again. Before signed times, every one of those delivered it again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from pubmesh.net.identity import init_authority, issue
from pubmesh.proto.gossip.hyparview import Join
from pubmesh.proto.gossip.plumtree import Gossip
from support.identity import STACK, free_port, identity_node
from support.insider import insider_link, insider_session
from support.netnode import NodeProcess, publish_until_delivered

pytestmark = [
    pytest.mark.xdist_group("net_replay"),
    pytest.mark.skipif(STACK != "gossip", reason="the insider joins through gossip's Join"),
]

#: the gossip layer forgets a publication's id 2 s after it saw it (90 s by default)
FORGET = ["--set", "id_retention=2", "--set", "payload_retention=1"]


def _delivered(node: NodeProcess, pub_id: int) -> int:
    return node.count(lambda r: r.get("event") == "deliver" and r["pub_id"] == pub_id)


def _forged(node: NodeProcess) -> dict[str, int]:
    forged: dict[str, int] = node.command({"op": "stats"})["stats"]["forged"]
    return forged


def test_a_captured_publication_is_never_delivered_twice(tmp_path: Path) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    subscriber = identity_node(tmp_path, authority, "subscriber", extra=FORGET)
    publisher = identity_node(tmp_path, authority, "publisher", subscriber, extra=FORGET)
    insider = issue(authority, f"127.0.0.1:{free_port()}", tmp_path / "insider")
    others: list[NodeProcess] = []
    try:
        for node in (subscriber, publisher):
            assert node.command({"op": "subscribe", "topic": "news"})["ok"]
        publish_until_delivered(publisher, [subscriber], "news", 20)

        # the insider joins the publisher's swarm and receives the next publication
        with insider_session(tmp_path / "insider", insider.node, publisher.address) as (
            send,
            receive,
        ):
            send([(Join(topic="news"), None, False)])
            time.sleep(0.5)
            pub_id = publisher.command({"op": "publish", "topic": "news", "payload": "once"})[
                "pub_id"
            ]
            deadline = time.monotonic() + 10
            captured: Any = None
            while captured is None and time.monotonic() < deadline:
                message, signed = receive()
                if isinstance(message, Gossip) and message.pub_id == pub_id:
                    captured = (message, signed, True)
            assert captured is not None and captured[1] is not None, "no signed copy captured"
            for node in (subscriber, publisher):
                node.wait_event(
                    lambda r: r.get("event") == "deliver" and r["pub_id"] == pub_id, 10, "it"
                )
            time.sleep(3.5)  # the gossip layer has forgotten the id everywhere

            # 1. to its own publisher (which forwards it to the subscriber): not again
            send([captured])
            # 2. to the subscriber, on a link of its own
            with insider_link(tmp_path / "insider", insider.node, subscriber.address) as again:
                again([captured])
                time.sleep(1.5)
        assert _delivered(publisher, pub_id) == 1, "delivered again at its own publisher"
        assert _delivered(subscriber, pub_id) == 1, "delivered again at the subscriber"
        assert _forged(publisher).get("replayed", 0) >= 1, _forged(publisher)
        assert _forged(subscriber).get("replayed", 0) >= 1, _forged(subscriber)

        # 3. to a node that started after the publication; 4. to the subscriber restarted
        fresh = identity_node(tmp_path, authority, "fresh", publisher, extra=FORGET)
        others.append(fresh)
        subscriber.stop()
        restarted = identity_node(tmp_path, authority, "subscriber", publisher, extra=FORGET)
        others.append(restarted)
        for node in (fresh, restarted):
            assert node.command({"op": "subscribe", "topic": "news"})["ok"]
            with insider_link(tmp_path / "insider", insider.node, node.address) as again:
                again([captured])
                time.sleep(1.0)
            assert _delivered(node, pub_id) == 0, f"{node.address}: an old copy delivered"
            assert _forged(node).get("stale", 0) >= 1, _forged(node)
        # and the overlay still carries new publications to all of them
        publish_until_delivered(publisher, [fresh, restarted], "news", 20)
    finally:
        for node in (*others, publisher, subscriber):
            node.stop()
