"""A scenario's workload as a plan for real processes: the same draws as the simulator.

``pubmesh cluster --workload FILE`` takes the ``[workload]`` keys of scenario files (and
``[run]``, ``[[faults]]`` of kinds crash and leave, ``[stack.<name>]``). So that one scenario
means one workload in both runtimes, :func:`plan` makes exactly the random draws
:class:`pubmesh.sim.engine.Simulation` makes, from the same streams, in the same order:

* the workload stream (``node_seed(seed, -3)``): start offsets within ``start_spread``, then
  each workload node's topics, then per publication its topic and its publisher among the
  live subscribers of that topic (or any live workload node), then the unsubscriptions;
* the fault stream (``node_seed(seed, -4)``): the victims of each crash or leave given as a
  fraction, among the live workload nodes at that moment other than the contact nodes (which
  run the experiment, papers/004 §3.1); victims named with ``nodes`` may be any live node.

Events at the same instant are ordered as the simulator's heap orders them: node starts, then
publications, then unsubscriptions, then faults, then subscriptions delayed by
``subscribe_at``. ``tests/test_net_cluster.py`` checks the plan against a simulated run's trace,
so a change on either side shows up as a failing test rather than as two runtimes quietly
running different workloads.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from pubmesh.errors import ScenarioError
from pubmesh.proto.core import node_seed
from pubmesh.sim.scenario import Scenario

_WORKLOAD, _FAULTS = -3, -4
SUPPORTED_FAULTS = ("crash", "leave")


@dataclass(frozen=True)
class PlannedPublication:
    t: float
    pub_id: int
    topic: str
    publisher: int


@dataclass(frozen=True)
class PlannedFault:
    t: float
    kind: str
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class PlannedUnsubscribe:
    t: float
    node: int
    topic: str


@dataclass
class WorkloadPlan:
    """Who does what when, in run time (seconds from the run's start), by node index."""

    nodes: int
    roles: dict[int, str]
    contacts: tuple[int, ...]
    starts: dict[int, float]
    topics: dict[int, list[str]]
    subscribe_at: float
    publications: list[PlannedPublication] = field(default_factory=list)
    unsubscriptions: list[PlannedUnsubscribe] = field(default_factory=list)
    faults: list[PlannedFault] = field(default_factory=list)

    def subscribe_time(self, node: int) -> float:
        return self.starts[node] + self.subscribe_at


def plan(scenario: Scenario) -> WorkloadPlan:
    """The workload of ``scenario`` as the simulator would run it (see the module docstring)."""
    from pubmesh.stacks.base import get_stack

    run, workload = scenario.run, scenario.workload
    for index, fault in enumerate(scenario.faults):
        if fault.kind not in SUPPORTED_FAULTS:
            raise ScenarioError(
                f"{scenario.source}: [[faults]] #{index + 1} kind: {fault.kind!r} is not "
                f"supported by the network runtime (kinds: {', '.join(SUPPORTED_FAULTS)})"
            )
    spec = get_stack(run.stack)
    roles = dict(spec.infrastructure(run.nodes, scenario.stack_params))
    contacts = tuple(spec.contacts(run.nodes, scenario.stack_params))
    rng = random.Random(node_seed(run.seed, _WORKLOAD))
    fault_rng = random.Random(node_seed(run.seed, _FAULTS))

    workload_nodes = [i for i in range(run.nodes) if i not in roles]
    starts: dict[int, float] = dict.fromkeys(roles, 0.0)
    for node in workload_nodes:
        starts[node] = rng.uniform(0.0, run.start_spread) if run.start_spread > 0 else 0.0
    topic_names = [f"t{i}" for i in range(workload.topics)]
    if workload.topic_popularity == "uniform":
        weights = [1.0] * len(topic_names)
    else:
        weights = [1.0 / math.pow(rank + 1, workload.zipf_s) for rank in range(len(topic_names))]

    def draw_topics() -> list[str]:
        chosen: list[str] = []
        pool = list(range(len(topic_names)))
        left_weights = list(weights)
        for _ in range(workload.subscriptions_per_node):
            index = rng.choices(range(len(pool)), weights=left_weights)[0]
            chosen.append(topic_names[pool.pop(index)])
            left_weights.pop(index)
        return sorted(chosen, key=lambda t: int(t[1:]))

    topics = {node: draw_topics() for node in workload_nodes}
    result = WorkloadPlan(
        nodes=run.nodes,
        roles=roles,
        contacts=contacts,
        starts=starts,
        topics=topics,
        subscribe_at=workload.subscribe_at,
    )

    # the timeline, in the simulator's heap order
    events: list[tuple[float, int, int]] = []
    for i in range(workload.publications):
        events.append((workload.publish_start + i / workload.publish_rate, 1, i))
    if workload.unsubscribe_fraction > 0:
        events.append((workload.unsubscribe_at, 2, 0))
    for j, fault in enumerate(scenario.faults):
        events.append((fault.at, 3, j))
    events.sort()

    crashed: set[int] = set()
    left: set[int] = set()
    unsubscribed: set[tuple[int, str]] = set()

    def started(node: int, t: float) -> bool:
        return starts[node] <= t

    def subscribed(node: int, topic: str, t: float) -> bool:
        if node in crashed or node in left or (node, topic) in unsubscribed:
            return False
        if topic not in topics.get(node, ()):
            return False
        if workload.subscribe_at > 0:
            return starts[node] + workload.subscribe_at < t
        return started(node, t)

    for t, kind, index in events:
        if kind == 1:
            topic = rng.choices(topic_names, weights=weights)[0]
            candidates: list[int] = []
            if workload.publisher == "subscriber":
                candidates = [n for n in workload_nodes if subscribed(n, topic, t)]
            if not candidates:
                candidates = [
                    n
                    for n in workload_nodes
                    if started(n, t) and n not in crashed and n not in left
                ]
            if not candidates:
                continue
            publisher = candidates[rng.randrange(len(candidates))]
            result.publications.append(PlannedPublication(t, index, topic, publisher))
        elif kind == 2:
            current = sorted(
                {n for n in workload_nodes for tp in topics[n] if subscribed(n, tp, t)}
            )
            count = round(workload.unsubscribe_fraction * len(current))
            for node in sorted(rng.sample(current, count)):
                own = sorted(tp for tp in topics[node] if subscribed(node, tp, t))
                topic = own[rng.randrange(len(own))]
                unsubscribed.add((node, topic))
                result.unsubscriptions.append(PlannedUnsubscribe(t, node, topic))
        else:
            fault = scenario.faults[index]
            if fault.nodes:  # named nodes: any live node, contacts and infrastructure included
                victims = sorted(
                    n
                    for n in set(fault.nodes)
                    if started(n, t)
                    and n not in crashed
                    and (fault.kind == "crash" or n not in left)
                )
            else:  # a fraction of the live workload nodes other than the contacts
                live = sorted(
                    n
                    for n in workload_nodes
                    if started(n, t) and n not in crashed and n not in left and n not in contacts
                )
                count = round((fault.fraction or 0.0) * len(live))
                victims = sorted(fault_rng.sample(live, count))
            (crashed if fault.kind == "crash" else left).update(victims)
            result.faults.append(PlannedFault(t, fault.kind, tuple(victims)))
    return result
