"""A scenario's workload for the network cluster: the shared plan, checked for what it runs.

The planner lives in :mod:`pubmesh.scenario.workload` and both runtimes consume its
:class:`~pubmesh.scenario.workload.WorkloadPlan` (its types are imported from there). The
cluster runs fault kinds crash, leave and recover (it starts the killed processes again), and
across network namespaces (``--netns``)
partition and heal; :func:`plan` refuses a scenario with any other kind, or a partition that
would split a namespace (one line naming the fault) before the cluster starts.

What the cluster reads of the plan: ``nodes``, ``roles``, ``contacts``, ``starts``,
``topics``, ``subscribe_at``, ``subscribe_time(node)``, ``publications`` (``t``, ``pub_id``,
``topic``, ``publisher``), ``unsubscriptions`` (``t``, ``node``, ``topic``) and ``faults``
(``t``, ``kind``, ``nodes``).
"""

from __future__ import annotations

from pubmesh.errors import ScenarioError
from pubmesh.scenario.model import Scenario
from pubmesh.scenario.workload import Partition, WorkloadPlan
from pubmesh.scenario.workload import plan as plan_workload

__all__ = ["NETNS_FAULTS", "SUPPORTED_FAULTS", "plan"]

SUPPORTED_FAULTS = ("crash", "leave", "recover")
#: fault kinds a cluster runs across network namespaces only (``--netns``)
NETNS_FAULTS = ("partition", "heal")


def plan(scenario: Scenario, *, netns: int = 0) -> WorkloadPlan:
    """The workload of ``scenario`` (:func:`pubmesh.scenario.workload.plan`), for fault kinds the
    network runtime supports: crash, leave and recover, and with ``netns`` namespaces
    (``--netns``) partition and heal, whose groups must keep every namespace whole (its links
    are what is cut)."""
    kinds = (*SUPPORTED_FAULTS, *NETNS_FAULTS) if netns else SUPPORTED_FAULTS
    for index, fault in enumerate(scenario.faults):
        if fault.kind in NETNS_FAULTS and not netns:
            raise ScenarioError(
                f"{scenario.source}: [[faults]] #{index + 1} kind: a {fault.kind} cuts real "
                "links between network namespaces; run the cluster with --netns K (root)"
            )
        if fault.kind not in kinds:
            raise ScenarioError(
                f"{scenario.source}: [[faults]] #{index + 1} kind: {fault.kind!r} is not "
                f"supported by the network runtime (kinds: {', '.join(kinds)})"
            )
    workload = plan_workload(scenario)
    if netns:
        from pubmesh.net.cluster.netns import namespace_of

        nodes = scenario.run.nodes
        for event in workload.faults:
            if not isinstance(event, Partition):
                continue
            sides: dict[int, set[int]] = {}  # namespace -> the groups its nodes are in
            for side, group in enumerate(event.groups):
                for node in group:
                    sides.setdefault(namespace_of(node, netns, nodes), set()).add(side)
            split = sorted(k for k, groups in sides.items() if len(groups) > 1)
            if split:
                k = split[0]
                members = [n for n in range(nodes) if namespace_of(n, netns, nodes) == k]
                raise ScenarioError(
                    f"{scenario.source}: [[faults]] #{event.index + 1}: the partition splits "
                    f"namespace {k} (with --netns {netns} it holds nodes "
                    f"{members[0]}..{members[-1]}); give groups = [[ids], …] that keep each "
                    "namespace's nodes together"
                )
    return workload
