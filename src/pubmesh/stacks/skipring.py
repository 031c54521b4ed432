"""The ``skipring`` stack's spec: the self-stabilizing supervised skip ring publish/subscribe
system of Feldmann, Kolb, Scheideler, Strothmann (IPDPS 2018), built to
docs/protocols/skipring.md. The protocols and the node live in :mod:`pubmesh.proto.skipring`.
"""

from __future__ import annotations

from pubmesh.proto.core import NodeId
from pubmesh.proto.skipring.corruption import KINDS, corrupt
from pubmesh.proto.skipring.legitimacy import is_legitimate
from pubmesh.proto.skipring.node import contacts, create, infrastructure
from pubmesh.proto.skipring.params import SkipRingParams
from pubmesh.proto.skipring.warm import warm_start
from pubmesh.stacks.base import StackSpec, register


def start_problem(role: str, contacts: tuple[NodeId, ...], me: NodeId) -> str | None:
    """A subscriber learns everything through the supervisor (Feldmann et al. §3): without
    one it retried an unset address every second and never joined."""
    if role != "supervisor" and not contacts:
        return (
            "a subscriber needs its supervisor: give the address of a node started with "
            "--role supervisor (pubmesh node --contact HOST:PORT, Node(contact=...))"
        )
    return None


SPEC = register(
    StackSpec(
        name="skipring",
        params_type=SkipRingParams,
        colour="#E69F00",
        create=create,
        infrastructure=infrastructure,
        contacts=contacts,
        corrupt=corrupt,
        corruption_kinds=KINDS,
        is_legitimate=is_legitimate,
        warm_start=warm_start,
        description=(
            "self-stabilizing supervised skip ring per topic (Feldmann et al.): supervisor "
            "database, BuildRing with label checks, shortcuts, Patricia-trie anti-entropy and "
            "flooding"
        ),
        demo_scenario="skipring_demo.toml",
        repair_layers=("publish",),
        non_overlay_layers=("supervisor",),
        timeout_param="timeout_interval",
        start_problem=start_problem,
        history=(
            "every publication ever issued on the topic, whatever the request "
            "(Feldmann et al. §4; kept in memory)"
        ),
        extra_metrics=(
            "history_reliability",
            "convergence_time",
            "supervisor_messages_per_subscribe",
            "supervisor_messages_per_unsubscribe",
            "config_requests",
        ),
    )
)
