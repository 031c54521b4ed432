"""The ``d2g`` stack's spec: topic groups as self-stabilizing random digraphs of diameter about
2 in the relay model (Scheideler's lecture §9.3, Build-D2G), built to docs/protocols/relay.md
(docs/protocols/d2g.md is the stack's page). The protocol lives in :mod:`pubmesh.proto.d2g` on
the clique's machinery and :mod:`pubmesh.proto.relay`."""

from __future__ import annotations

from pubmesh.proto.d2g.corruption import KINDS, corrupt, warm_start
from pubmesh.proto.d2g.legitimacy import is_legitimate
from pubmesh.proto.d2g.node import contacts, create, infrastructure
from pubmesh.proto.d2g.params import D2GParams
from pubmesh.stacks.base import StackSpec, register

SPEC = register(
    StackSpec(
        name="d2g",
        params_type=D2GParams,
        colour="#56B4E9",
        create=create,
        infrastructure=infrastructure,
        contacts=contacts,
        is_legitimate=is_legitimate,
        corrupt=corrupt,
        corruption_kinds=KINDS,
        warm_start=warm_start,
        timeout_param="timeout",
        demo_scenario="d2g_demo.toml",
        extra_metrics=("convergence_time", "history_reliability", "replayed"),
        description=(
            "self-stabilizing topic digraphs of diameter about 2 in the relay model "
            "(Scheideler's lecture §9.3): Build-D2G with the FIFO neighbour queue, twins, the "
            "in-link repair and the in-degree cap; flooding in at most 2 hops for nearly all "
            "pairs"
        ),
        history=(
            "what the contact retains: the newest history_count (1,024) publications per topic "
            "within history_seconds (600) and history_bytes (4 MiB), sent when the subscriber "
            "joins"
        ),
        repair_layers=("relay",),
        non_overlay_layers=(),
    )
)
