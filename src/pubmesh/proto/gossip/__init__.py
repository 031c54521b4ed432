"""The gossip stack's protocols: topic publish/subscribe over HyParView + Plumtree (Henriques &
Pamplona).

* :mod:`.node` — :class:`GossipNode`, which composes one HyParView and one Plumtree per topic
  swarm behind the pub/sub interface (Henriques & Pamplona §2.2);
* :mod:`.hyparview` — HyParView membership of one topic swarm (DSN 2007 §4), with its messages;
* :mod:`.plumtree` — Plumtree broadcast over the active view (SRDS 2007 §3), with its messages;
* :mod:`.rooted` — the rooted tree (``tree = "rooted"``, the default): Plumtree's eager links
  chosen by a root-distance gradient, so that concurrent broadcasts cannot cut the tree;
* :mod:`.params` — the ``[stack.gossip]`` parameters (the papers' defaults);
* :mod:`.warm` — warm start: per topic, a HyParView overlay built by construction.
"""

from pubmesh.proto.gossip.node import GossipNode, SwarmTimer
from pubmesh.proto.gossip.params import GossipParams

__all__ = ["GossipNode", "GossipParams", "SwarmTimer"]
