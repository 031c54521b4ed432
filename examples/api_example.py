"""pubmesh's Python API in one file: three nodes, a topic, a few publications.

Run it:

    python examples/api_example.py                 # the gossip stack
    python examples/api_example.py --stack skipring

The three nodes share this process and talk to each other over real TCP on 127.0.0.1, exactly as
nodes in separate processes or machines would (``pubmesh node`` runs the same code). The first
node is the cluster's contact (for skipring, its supervisor); the other two join through it.
Every connection is authenticated with the cluster key: ``$PUBMESH_KEY`` if set, else a fresh
random key for this run. ``pubmesh.Node`` is :class:`pubmesh.api.Node`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets

from pubmesh.api import Lagged, Node


async def main(stack: str, count: int) -> None:
    key = os.environ.get("PUBMESH_KEY") or secrets.token_hex(32)
    contact_role = "supervisor" if stack == "skipring" else "peer"

    async with Node(stack=stack, listen="127.0.0.1:0", key=key, role=contact_role) as contact:
        print(f"contact node on {contact.address} (id {contact.id})")
        async with (
            Node(stack=stack, listen="127.0.0.1:0", contact=contact.address, key=key) as alice,
            Node(stack=stack, listen="127.0.0.1:0", contact=contact.address, key=key) as bob,
        ):
            news = await bob.subscribe("news")
            await alice.subscribe("news")  # alice is a member of the topic's overlay too
            await asyncio.sleep(1.0)  # let the overlay form
            print(f"bob's neighbours: {bob.neighbors()}")

            # a receipt per publication: accepted (with its id), or refused with a reason
            receipts = [await alice.publish("news", f"hello #{i} from alice") for i in range(count)]
            sent = [r.pub_id for r in receipts if r.accepted]
            received = set()
            while len(received) < len(sent):
                message = await news.get(timeout=10)
                if isinstance(message, Lagged):  # bob fell behind: some were dropped for him
                    print(f"bob missed {message.missed} publications of {message.topic}")
                    break
                received.add(message.pub_id)
                print(
                    f"bob got [{message.topic}] {message.payload.decode()!r} "
                    f"after {message.hops} hop(s)"
                )
            assert received == set(sent)

            stats = bob.statistics()
            print(
                f"bob: {stats.deliveries} deliveries, "
                f"{stats.transport.frames_received} frames in, "
                f"{stats.transport.frames_sent} frames out"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="gossip", help="stack to run (default gossip)")
    parser.add_argument("--count", type=int, default=3, help="publications to send")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.stack, arguments.count))
