"""The ``brokertree`` stack's spec: δ-fault-tolerant content-based publish/subscribe over a
broker tree with exactly-once, per-publisher in-order delivery (Kazemzadeh & Jacobsen), built
to docs/protocols/brokertree.md. The protocol lives in :mod:`pubmesh.proto.brokertree`.

Brokers are nodes 0 … B−1 (``[stack.brokertree] brokers``, or a fifth of the nodes): the
stack's infrastructure, and the well-known nodes every node is started with, from which each
computes the same tree (spec §2). The workload's nodes are the clients.
"""

from __future__ import annotations

from typing import Any

from pubmesh.proto.brokertree.node import create
from pubmesh.proto.brokertree.params import BrokerTreeParams, broker_count
from pubmesh.proto.core import NodeId
from pubmesh.stacks.base import StackSpec, register


def infrastructure(n: int, params: Any) -> dict[NodeId, str]:
    """Brokers 0 … B−1 (spec §2)."""
    return {b: "broker" for b in range(broker_count(n, params))}


def start_problem(role: str, brokers: tuple[NodeId, ...], me: NodeId) -> str | None:
    """Every node is given the brokers, the same list in the same order (spec §2): at least
    two distinct ones (a tree of one broker has no edge to bypass a failure over), and a
    broker finds itself among them."""
    if len(brokers) < 2:
        return (
            f"a broker tree needs at least 2 brokers, got {len(brokers)}: give every broker "
            "and client the list of brokers, the same list in the same order (pubmesh node "
            "--contact B1 --contact B2 ..., Node(contact=[...]))"
        )
    if len(set(brokers)) != len(brokers):
        return "the broker list names a broker twice: give each broker once, in one order"
    if role == "broker" and me not in brokers:
        return (
            "this broker is not in the broker list it was given: list every broker, itself "
            "included, in the same order on every node"
        )
    return None


def contacts(n: int, params: Any) -> tuple[NodeId, ...]:
    """Every node is told the brokers, in ordinal order: the generator's input (spec §2)."""
    return tuple(range(broker_count(n, params)))


SPEC = register(
    StackSpec(
        name="brokertree",
        params_type=BrokerTreeParams,
        colour="#CC79A7",
        create=create,
        infrastructure=infrastructure,
        contacts=contacts,
        content_based=True,
        start_problem=start_problem,
        demo_scenario="brokertree_demo.toml",
        extra_metrics=("stalls", "tagged", "safety_drops", "history_reliability", "replayed"),
        description=(
            "δ-fault-tolerant content-based broker tree (Kazemzadeh & Jacobsen): topology maps "
            "to δ+1 hops, bypass of failed brokers, sequence vectors, exactly-once in-order "
            "delivery"
        ),
        repair_layers=(),
        history=(
            "what each matching publisher client still retains of its own publications: the "
            "newest history_count (1,024) per topic, history_seconds (600), within history_bytes"
        ),
    )
)
