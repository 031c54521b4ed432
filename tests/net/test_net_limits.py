"""A publication too large for the cluster's frames is refused at ``publish``, never sent to
tear a link down.

Before, a publication of 1 MiB or more crossed the sender's transport, the receiver refused
the frame from its length prefix and dropped the connection, both ends reported a failure, and
``publish`` still answered ok. Now ``publish`` refuses it with an error naming the sizes, the
transport refuses to send any frame over the limit (counted as a drop, the link kept), and a
publication just under the limit is delivered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pubmesh.api import Node
from pubmesh.net.admission import PUBLICATION_HEADROOM, PublicationTooLarge
from pubmesh.proto.gossip.plumtree import Gossip
from support.netnode import KEY_TEXT, NodeProcess, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
ROLE = "supervisor" if STACK == "skipring" else "peer"


def test_a_publication_over_the_limit_is_refused_and_one_under_it_delivered() -> None:
    async def main() -> None:
        async with (
            Node(STACK, listen="127.0.0.1:0", key=KEY_TEXT, role=ROLE) as contact,
            Node(STACK, listen="127.0.0.1:0", contact=contact.address, key=KEY_TEXT) as a,
            Node(STACK, listen="127.0.0.1:0", contact=contact.address, key=KEY_TEXT) as b,
        ):
            limit = a.max_publication
            assert limit == (1 << 20) - PUBLICATION_HEADROOM
            got = await b.subscribe("big")
            await a.subscribe("big")
            for _ in range(100):
                if b.neighbors().get("big") and a.neighbors().get("big"):
                    break
                await asyncio.sleep(0.05)
            with pytest.raises(PublicationTooLarge) as caught:
                await a.publish("big", b"x" * (2 << 20))
            said = str(caught.value)
            assert "2,097,155 bytes" in said and f"limit of {limit:,} bytes" in said, said
            # just under the limit: delivered, and every link stays up
            fits = b"y" * (limit - len("big"))
            pub_id = (await a.publish("big", fits)).pub_id
            delivery = await got.get(timeout=20)
            assert (delivery.pub_id, delivery.payload) == (pub_id, fits)
            # a frame over the limit is never sent, whoever asks: dropped and counted here
            transport = a.runtime.transport
            assert transport is not None
            huge = Gossip(topic="big", pub_id=7, round=0, payload=b"z" * (1 << 20))
            transport.send(b.id, huge, 0.0)
            assert transport.drops["oversized"] == 1
            await asyncio.sleep(0.5)
            for node in (a, b, contact):
                stats = node.statistics()
                assert not stats.transport.rejected, stats
                assert stats.transport.connections_lost == 0, stats
                assert stats.peer_down_notices == 0, stats
            small = (await a.publish("big", b"after")).pub_id
            while (delivery := await got.get(timeout=20)).pub_id != small:
                pass

    asyncio.run(asyncio.wait_for(main(), 90))


def test_the_node_process_answers_an_oversized_publish_with_an_error(tmp_path: Path) -> None:
    args = ["--stack", STACK, "--listen", "127.0.0.1:0", "--role", ROLE]
    node = NodeProcess(args, log=tmp_path / "node.log")
    try:
        answer = node.command({"op": "publish", "topic": "t", "payload_size": 1 << 20}, timeout=30)
        assert not answer["ok"] and "over this cluster's limit" in answer["error"], answer
        assert node.command({"op": "subscribe", "topic": "t"})["ok"]  # still serving
    finally:
        node.stop()
