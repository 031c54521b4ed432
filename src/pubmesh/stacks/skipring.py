"""The ``skipring`` stack: the self-stabilizing supervised skip ring publish/subscribe system of
papers/000 (Feldmann, Kolb, Scheideler, Strothmann, IPDPS 2018), built to specs/skipring.md.

Node 0 is the supervisor (the hard-coded gateway of papers/000 §1.1; ``infrastructure`` and
``contacts``); every other node is a subscriber. Per topic, the subscribers build the skip ring
SR(n) with the supervisor's help (BuildSR, §3), keep every publication ever issued in a Patricia
trie that CheckTrie keeps in sync (§4.2), and flood new publications over ring edges and
shortcuts (§4.3). The protocol lives in :mod:`pubmesh.proto.skipring`.
"""

from __future__ import annotations

from typing import Any

from pubmesh.proto.core import NodeContext, NodeId
from pubmesh.proto.skipring.corruption import KINDS, corrupt
from pubmesh.proto.skipring.legitimacy import is_legitimate
from pubmesh.proto.skipring.params import SkipRingParams
from pubmesh.proto.skipring.subscriber import Subscriber
from pubmesh.proto.skipring.supervisor import Supervisor
from pubmesh.stacks.base import StackNode, StackSpec, register

SUPERVISOR_ID: NodeId = 0


def create(ctx: NodeContext) -> StackNode:
    """A supervisor for the node with role "supervisor", a subscriber for every other node."""
    if ctx.params is None:
        ctx.params = SkipRingParams()
    if ctx.role == "supervisor":
        return Supervisor(ctx)
    return Subscriber(ctx)


def infrastructure(n: int, params: Any) -> dict[NodeId, str]:
    return {SUPERVISOR_ID: "supervisor"}


def contacts(n: int, params: Any) -> tuple[NodeId, ...]:
    return (SUPERVISOR_ID,)


SPEC = register(
    StackSpec(
        name="skipring",
        params_type=SkipRingParams,
        create=create,
        infrastructure=infrastructure,
        contacts=contacts,
        corrupt=corrupt,
        corruption_kinds=KINDS,
        is_legitimate=is_legitimate,
        description=(
            "self-stabilizing supervised skip ring per topic (papers/000): supervisor database, "
            "BuildRing with label checks, shortcuts, Patricia-trie anti-entropy and flooding"
        ),
    )
)
