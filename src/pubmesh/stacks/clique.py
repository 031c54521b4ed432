"""The ``clique`` stack's spec: topic groups as self-stabilizing cliques in the relay model
(Scheideler's lecture chapter 9, Build-Clique), built to docs/protocols/relay.md. The
protocol lives in :mod:`pubmesh.proto.clique` over :mod:`pubmesh.proto.relay`."""

from __future__ import annotations

from pubmesh.proto.clique.corruption import KINDS, corrupt, warm_start
from pubmesh.proto.clique.legitimacy import is_legitimate
from pubmesh.proto.clique.node import contacts, create, infrastructure
from pubmesh.proto.clique.params import CliqueParams
from pubmesh.stacks.base import StackSpec, register

SPEC = register(
    StackSpec(
        name="clique",
        params_type=CliqueParams,
        colour="#D55E00",
        create=create,
        infrastructure=infrastructure,
        contacts=contacts,
        is_legitimate=is_legitimate,
        corrupt=corrupt,
        corruption_kinds=KINDS,
        warm_start=warm_start,
        timeout_param="timeout",
        demo_scenario="clique_demo.toml",
        extra_metrics=("convergence_time", "history_reliability", "replayed"),
        description=(
            "self-stabilizing topic cliques in the relay model (Scheideler's lecture): "
            "Build-Clique with safe introductions, delegation, Leave with an anchor; flooding "
            "in one hop"
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
