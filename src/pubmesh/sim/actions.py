"""What a scenario has the simulator do besides running its nodes' own events: the warm start
(``[init] overlay = "warm"``), the plan's events (:func:`pubmesh.scenario.workload.plan`), the
``[init]`` corruption and the snapshots. :class:`pubmesh.sim.engine.Simulation` decides when
each runs (the plan from its cursor, the rest as scheduled actions); these only carry them out,
on the simulation's state, so moving them here changes no event's order or time.
"""

from __future__ import annotations

import inspect
import random
from typing import TYPE_CHECKING, Any

from pubmesh.proto.core import NodeId, Publish, SetTimer, Start, Subscribe, Unsubscribe
from pubmesh.scenario.workload import (
    ChurnBegin,
    ChurnEvent,
    FaultEvent,
    Heal,
    NodeStart,
    Partition,
    PlanEvent,
    Publication,
    Subscription,
    Unsubscription,
)

if TYPE_CHECKING:
    from pubmesh.sim.engine import Simulation


class ScenarioActions:
    """The scenario's actions on one :class:`~pubmesh.sim.engine.Simulation` (module
    docstring)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    # ------------------------------------------------------------------ warm start
    def warm_start(self, rng: random.Random) -> None:
        """``[init] overlay = "warm"``: every initial node is up at t = 0 and subscribed to its
        workload topics, and the stack's ``warm_start`` hook rewrites their state into a
        legitimate overlay. The timers the nodes set while starting and subscribing are kept
        (their periodic protocol actions run as usual); their messages, the joins the warm
        overlay replaces, are dropped. The plan's first subscription of each of these nodes
        is then a no-op (``Simulation._warm_skip``), and so is its start while it is up. A late
        subscriber (``[workload] late_fraction``) is in the warm overlay unsubscribed and
        subscribes at ``late_at``, with its history request, as the plan says. ``rng`` is the
        warm start's own stream, handed to the hook."""
        sim = self.sim
        warm = sim.spec.warm_start
        assert warm is not None  # the scenario parser refuses "warm" for a stack without one
        writer = sim.writer
        kept: dict[NodeId, list[Any]] = {}
        subscribed: set[tuple[NodeId, str]] = set()
        start = Start(sim.contacts)
        for node in sorted(sim.plan.starts):
            obj = sim._create(node)
            role = sim.roles.get(node, "peer")
            if writer:
                writer.node(node, 0.0, "up", role)
            timers = [o for o in obj.handle(start, 0.0) if type(o) is SetTimer]
            filters = sim.plan.filters.get(node, {})
            # a late subscriber is in the overlay, but not yet subscribed: it subscribes at
            # late_at, as the plan says
            for topic in () if node in sim.plan.late else sim.plan.topics.get(node, ()):
                key = (node, topic)
                sim._subscribed[key] = 0.0
                sim.topic_subscribers.setdefault(topic, set()).add(node)
                sim._sub_filters[key] = filters.get(topic)
                subscribed.add(key)
                command = Subscribe(topic, sim._sub_filters[key])
                timers.extend(o for o in obj.handle(command, 0.0) if type(o) is SetTimer)
            kept[node] = timers
        warm(dict(sim.nodes), rng, sim.params)
        for node, timers in kept.items():
            sim._apply(node, timers)
        skip = sim._warm_skip = bytearray(len(sim._plan_events))
        for index, event in enumerate(sim._plan_events):
            if type(event) is Subscription and (event.node, event.topic) in subscribed:
                subscribed.discard((event.node, event.topic))  # only the first is a no-op
                skip[index] = 1

    # ------------------------------------------------------------------ the plan
    def planned(self, event: PlanEvent) -> None:
        """Run one event of the plan."""
        sim = self.sim
        writer = sim.writer
        if isinstance(event, Subscription):
            sim.command(event.node, Subscribe(event.topic, event.filter, event.history))
        elif isinstance(event, Publication):
            sim.command(
                event.publisher,
                Publish(event.topic, event.pub_id, event.payload(), event.attributes),
            )
        elif isinstance(event, NodeStart):
            if event.node not in sim.alive:
                sim._start_node(event.node)
        elif isinstance(event, Unsubscription):
            sim.command(event.node, Unsubscribe(event.topic))
        elif isinstance(event, FaultEvent):
            if event.kind == "crash":
                sim.crash(event.nodes)
            elif event.kind == "leave":
                sim.leave(event.nodes)
            else:
                sim.recover(event.nodes, durable=event.durable)
            if writer:
                detail: dict[str, Any] = {"nodes": list(event.nodes)}
                if event.durable:
                    detail["durable"] = True
                writer.fault(sim.now, event.kind, detail)
        elif isinstance(event, Partition):
            sim._partition = {
                node: group for group, members in enumerate(event.groups) for node in members
            }
            if writer:
                writer.fault(sim.now, "partition", {"sizes": [len(g) for g in event.groups]})
        elif isinstance(event, Heal):
            sim._partition = None
            if writer:
                writer.fault(sim.now, "heal", {})
        elif isinstance(event, ChurnBegin):
            if writer:
                writer.fault(sim.now, "churn", {"rate": event.rate, "until": event.until})
        elif isinstance(event, ChurnEvent):
            if event.kind == "join":
                sim.node_topics.setdefault(event.node, list(sim.plan.topics.get(event.node, ())))
                sim._join(event.node)
            elif event.kind == "leave":
                sim.leave([event.node])
            else:
                sim.crash([event.node])
            if writer:
                writer.fault(sim.now, f"churn-{event.kind}", {"node": event.node})

    # ------------------------------------------------------------------ corruption
    def corrupt(self) -> None:
        """``[init] corruption``: the stack's ``corrupt`` hook rewrites the live nodes' state
        and may return junk messages, put in flight now."""
        sim = self.sim
        corrupt = sim.spec.corrupt
        if corrupt is None:
            return
        kind = sim.scenario.init.corruption
        kwargs: dict[str, Any] = {}
        if "junk_messages" in inspect.signature(corrupt).parameters:
            kwargs["junk_messages"] = sim.scenario.init.junk_messages
        live = {n: sim.nodes[n] for n in sorted(sim.nodes)}
        junk = corrupt(kind, live, sim._corrupt_rng, sim.params, **kwargs)
        for src, dst, message in junk or []:
            sim.inject(src, dst, message)
        if sim.writer:
            sim.writer.fault(sim.now, "corruption", {"kind": kind, "junk": len(junk or [])})

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> None:
        """Every live node's snapshot rows (and the legitimacy check, where the stack has one)
        to the trace, and the next snapshot scheduled (``[trace] snapshot_interval``)."""
        sim = self.sim
        writer = sim.writer
        if writer is not None:
            for node in sorted(sim.nodes):
                for row in sim.nodes[node].snapshot():
                    writer.snapshot(
                        sim.now, node, row.topic, row.layer, list(row.neighbors), row.state
                    )
            if sim.spec.is_legitimate is not None:
                live = {n: sim.nodes[n] for n in sorted(sim.nodes)}
                writer.check(sim.now, "legitimate", bool(sim.spec.is_legitimate(live)))
        interval = sim.scenario.trace.snapshot_interval
        if sim.now + interval <= sim.scenario.run.duration + 1e-9:
            sim.at(sim.now + interval, self.snapshot)
