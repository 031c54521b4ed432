"""pubmesh's Python API in one file: a small cluster, a topic, a few publications.

Run it:

    python examples/api_example.py                   # the gossip stack
    python examples/api_example.py --stack skipring  # any stack: pubmesh stacks lists them

The nodes share this process and talk to each other over real TCP on 127.0.0.1, exactly as
nodes in separate processes or machines would (``pubmesh node`` runs the same code). What the
cluster needs besides alice and bob depends on the stack: one contact node for most (for
skipring, its supervisor); for brokertree, two brokers that every node lists in the same
order. Every connection is authenticated with the cluster key: ``$PUBMESH_KEY`` if set, else a
fresh random key for this run. ``pubmesh.Node`` is :class:`pubmesh.api.Node`.
examples/content_example.py shows filters and attributes on the content-based stacks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets

from pubmesh.api import Lagged, Node


async def infrastructure(stack: str, key: str, nodes: contextlib.AsyncExitStack) -> list[str]:
    """Start what ``stack`` needs before anyone joins; the addresses everyone is given."""
    if stack == "brokertree":
        # brokers must each know every broker, themselves included: listen first (port 0
        # picks a free port), then join once all addresses are known
        brokers = [Node(stack, listen="127.0.0.1:0", key=key, role="broker") for _ in range(2)]
        for broker in brokers:
            await broker.start(boot=False)
            nodes.push_async_callback(broker.close)
        addresses = [broker.address for broker in brokers]
        for broker in brokers:
            broker.boot(addresses)
        print(f"brokers on {', '.join(addresses)}")
        return addresses
    role = "supervisor" if stack == "skipring" else "peer"
    contact = await nodes.enter_async_context(Node(stack, listen="127.0.0.1:0", key=key, role=role))
    print(f"contact node on {contact.address} (id {contact.id})")
    return [contact.address]


async def main(stack: str, count: int) -> None:
    key = os.environ.get("PUBMESH_KEY") or secrets.token_hex(32)
    async with contextlib.AsyncExitStack() as nodes:
        contact = await infrastructure(stack, key, nodes)
        alice = await nodes.enter_async_context(Node(stack, contact=contact, key=key))
        bob = await nodes.enter_async_context(Node(stack, contact=contact, key=key))
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
