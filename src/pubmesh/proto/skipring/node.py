"""The skipring node: which protocol object a node of the stack runs, and who the supervisor is.

Node 0 is the supervisor (the hard-coded gateway of Feldmann et al. §1.1); every other node is a
subscriber. Per topic, the subscribers build the skip ring SR(n) with the supervisor's help
(BuildSR, §3), keep every publication ever issued in a Patricia trie that CheckTrie keeps in
sync (§4.2), and flood new publications over ring edges and shortcuts (§4.3).

The rules that keep it correct are the parts', each stated in its module: the supervisor
computes every configuration from a repaired database (:mod:`.supervisor`), a subscriber with a
label never silently drops a reference (:mod:`.ring`), which keeps the ring weakly connected,
and publications are only ever inserted, never removed (:mod:`.publications`,
:mod:`.patricia`), so each subscriber's set only grows towards the topic's union.
"""

from __future__ import annotations

from typing import Any

from pubmesh.proto.core import NodeContext, NodeId, StackNode
from pubmesh.proto.skipring.params import SkipRingParams
from pubmesh.proto.skipring.subscriber import Subscriber
from pubmesh.proto.skipring.supervisor import Supervisor

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
