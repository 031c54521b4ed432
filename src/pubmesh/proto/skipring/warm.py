"""Warm start of the skipring stack: every topic's skip ring SR(n) built by construction.

``[init] overlay = "warm"`` starts every subscriber subscribed, in the legitimate state of
Feldmann et al. §3 (Definition 1, the skip ring SR(n)) instead of by subscribe requests to the
supervisor: per topic, the members in a random order get the labels l(0) .. l(n−1), their exact
ring neighbours and shortcuts, and the supervisor's database records exactly them under those
labels (§3.1, the legitimate database). This is the same construction as the corruption kinds'
starting point (:func:`pubmesh.proto.skipring.legitimacy.install`), so the stack's legitimacy
predicate holds at t = 0; the protocols' periodic actions (timeouts, the supervisor's
round-robin configurations, trie checks) run from there as usual.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from pubmesh.proto.core import NodeId, StackNode
from pubmesh.proto.skipring.legitimacy import install, members, split


def warm_start(nodes: Mapping[NodeId, StackNode], rng: random.Random, params: object) -> None:
    """StackSpec.warm_start of the skipring stack (see the module docstring)."""
    supervisor, subscribers = split(nodes)
    if supervisor is None:
        raise ValueError("a skipring warm start needs the supervisor among the nodes")
    topics = sorted({t for s in subscribers.values() for t in s.topics})
    for topic in topics:
        order = list(members(subscribers, topic))
        rng.shuffle(order)
        install(supervisor, subscribers, topic, order)
