"""Content-based publish/subscribe with pubmesh's Python API: filters and attributes.

Run it:

    python examples/content_example.py                      # the chord stack
    python examples/content_example.py --stack brokertree

On a content-based stack (chord, brokertree) a subscription may carry a filter on the
publications' attributes, and only the publications it matches are delivered: the overlay
prunes the others on the way, they are not filtered at the subscriber. Here bob wants quotes
of s3 under 100, carol every quote of s3; alice publishes four quotes. A filter is a JSON
object, one entry per attribute: a value (equality) or operators (``eq``, ``ne``, ``lt``,
``le``, ``gt``, ``ge``, ``in``, ``prefix``; ``{"prefix": ""}`` asks only that the attribute be
there); ``pubmesh node``'s shell takes the same
filter after ``subscribe TOPIC``. A topic-based stack refuses filters and attributes with a
``UserError``, as the shell does. The cluster is built as in examples/api_example.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets

from api_example import infrastructure

from pubmesh.api import Node

QUOTES = [("s3", 99.5), ("s3", 120.0), ("s4", 42.0), ("s3", 7.25)]


async def main(stack: str) -> None:
    key = os.environ.get("PUBMESH_KEY") or secrets.token_hex(32)
    async with contextlib.AsyncExitStack() as nodes:
        contact = await infrastructure(stack, key, nodes)
        alice, bob, carol = [
            await nodes.enter_async_context(Node(stack, contact=contact, key=key)) for _ in range(3)
        ]
        cheap = await bob.subscribe("quotes", {"symbol": "s3", "price": {"lt": 100}})
        every = await carol.subscribe("quotes", {"symbol": "s3"})
        await asyncio.sleep(1.0)  # let the subscriptions reach the overlay
        for symbol, price in QUOTES:
            receipt = await alice.publish(
                "quotes", f"{symbol} at {price}", attributes={"symbol": symbol, "price": price}
            )
            assert receipt.accepted, receipt.reason
        for name, subscription, want in (("bob", cheap, 2), ("carol", every, 3)):
            for _ in range(want):
                message = await subscription.get(timeout=10)
                print(f"{name} got {message.payload.decode()!r} {message.attributes}")
        await asyncio.sleep(0.5)  # anything else would have arrived by now
        print(f"bob: {bob.statistics().deliveries} deliveries (the s3 quotes under 100)")
        print(f"carol: {carol.statistics().deliveries} deliveries (every s3 quote)")
        assert bob.statistics().deliveries == 2 and carol.statistics().deliveries == 3


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="chord", help="chord (default) or brokertree")
    asyncio.run(main(parser.parse_args().stack))
