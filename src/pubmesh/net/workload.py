"""A scenario's workload for the network cluster: the shared plan of :mod:`pubmesh.workload`.

The planner lives in :mod:`pubmesh.workload` and both runtimes consume its
:class:`~pubmesh.workload.WorkloadPlan`; this module keeps the names ``pubmesh cluster`` has
always imported from here. The cluster runs fault kinds crash and leave only, so :func:`plan`
refuses a scenario with any other kind (one line naming the fault) before the cluster starts.

What the cluster reads of the plan: ``nodes``, ``roles``, ``contacts``, ``starts``,
``topics``, ``subscribe_at``, ``subscribe_time(node)``, ``publications`` (``t``, ``pub_id``,
``topic``, ``publisher``), ``unsubscriptions`` (``t``, ``node``, ``topic``) and ``faults``
(``t``, ``kind``, ``nodes``).
"""

from __future__ import annotations

from pubmesh.errors import ScenarioError
from pubmesh.sim.scenario import Scenario
from pubmesh.workload import FaultEvent, Publication, Unsubscription, WorkloadPlan
from pubmesh.workload import plan as plan_workload

__all__ = [
    "SUPPORTED_FAULTS",
    "PlannedFault",
    "PlannedPublication",
    "PlannedUnsubscribe",
    "WorkloadPlan",
    "plan",
]

SUPPORTED_FAULTS = ("crash", "leave")

#: the names the cluster knew these types by
PlannedPublication = Publication
PlannedFault = FaultEvent
PlannedUnsubscribe = Unsubscription


def plan(scenario: Scenario) -> WorkloadPlan:
    """The workload of ``scenario`` (:func:`pubmesh.workload.plan`), for fault kinds the
    network runtime supports."""
    for index, fault in enumerate(scenario.faults):
        if fault.kind not in SUPPORTED_FAULTS:
            raise ScenarioError(
                f"{scenario.source}: [[faults]] #{index + 1} kind: {fault.kind!r} is not "
                f"supported by the network runtime (kinds: {', '.join(SUPPORTED_FAULTS)})"
            )
    return plan_workload(scenario)
