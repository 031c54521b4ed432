"""The ``gossip`` stack's spec: HyParView + Plumtree per topic swarm (docs/protocols/gossip.md).

The protocols and the node live in :mod:`pubmesh.proto.gossip`; this is what the runtimes, the
analysis and the demo learn about the stack.
"""

from __future__ import annotations

from pubmesh.proto.gossip import GossipNode, GossipParams
from pubmesh.proto.gossip.warm import warm_start
from pubmesh.stacks.base import StackSpec, register

SPEC = register(
    StackSpec(
        name="gossip",
        params_type=GossipParams,
        colour="#0072B2",
        create=GossipNode,
        contacts=lambda n, params: (0,),
        description=(
            "HyParView membership + Plumtree broadcast per topic swarm (Leitão, Pereira, "
            "Rodrigues, DSN 2007 and SRDS 2007)"
        ),
        demo_scenario="paper004_fail50.toml",
        repair_layers=("broadcast",),
        warm_start=warm_start,
        extra_metrics=("history_reliability", "replayed"),
        history=(
            "what the swarm's members still cache: payload_retention seconds (30), "
            "within cache_bytes"
        ),
    )
)
