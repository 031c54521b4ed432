"""The workload of a scenario, planned once for every runtime.

How the planner works
=====================
A scenario's workload is everything that happens *to* the nodes rather than *between* them:
which nodes start when and with which role, what they subscribe to (and with which filter),
who publishes what when (with which attributes), who unsubscribes, and the faults: crashes,
graceful leaves, recoveries, partitions, heals and churn. None of it depends on the protocol.
A publisher is drawn among the live subscribers of a topic, a victim among the live workload
nodes, and whether a node is live or subscribed is decided by the workload itself, never by a
protocol message. So :func:`plan` can run the workload on its own, without any stack, and
write down the outcome: a :class:`WorkloadPlan`, a timeline of typed events with every random
choice already made and every victim resolved to node ids. The simulator
(:mod:`pubmesh.sim.engine`) and the network cluster (:mod:`pubmesh.net.cluster`) both consume
that plan, so one scenario means one workload in both runtimes by construction rather than by
two implementations kept in step.

The planner is a small discrete-event loop over a heap of workload events keyed ``(time,
sequence)``, the simulator's own key. It keeps just enough state to make the draws: the live
set, the crashed and the left nodes, each node's incarnation (a recovery is a new incarnation,
and a subscription scheduled by an older one is dropped), the live subscriptions per topic and
per node, and the current partition. Each event it processes is appended to the timeline, so
the timeline is in execution order and its times never decrease.

Random streams
--------------
Every draw comes from a seeded :class:`random.Random`, one per concern, so adding a concern
never shifts the draws of another (and nothing depends on Python's hash seed):

* workload, ``node_seed(seed, -3)``: node start offsets within ``start_spread`` (workload
  nodes in id order), then each workload node's topics (by popularity, without replacement),
  then, as the timeline unfolds, each publication's topic and publisher, the unsubscriptions,
  and the topics of nodes that join by churn;
* faults, ``node_seed(seed, -4)``: victims of fault fractions, partition sides, churn gaps
  (exponential), churn event kinds and churn victims;
* attributes, ``node_seed(seed, -6)``: one value per schema attribute (in name order) for
  every publication id, drawn whether or not the publication happens, so a publication's
  attributes do not depend on the live set; scenarios without ``[workload.attributes]`` make
  no draw here, so adding attributes to a scenario changes none of its other draws;
* filters, ``node_seed(seed, -7)``: one filter per (node, topic), drawn when the node's topics
  are drawn, only for stacks whose spec says ``content_based``. A recovered node resubscribes
  with the same filters.
* late subscribers, ``node_seed(seed, -8)``: the ``late_fraction`` of the initial workload
  nodes (a sample of them in id order) whose first subscriptions wait until ``late_at`` and ask
  for ``history``; scenarios without late subscribers make no draw here. A late node that
  recovers resubscribes as any node does, without a history request.

Order of events at one instant
------------------------------
Events are ordered by time, then by the order in which they were scheduled (the simulator's
rule, which is also SimPy's). What is scheduled up front, in this order: node starts (by start
time, then id; infrastructure nodes at 0), publications (by id), the unsubscription step, and
the scenario's ``[[faults]]`` in file order. What is scheduled as the run unfolds comes after
everything scheduled earlier for the same instant: a node's subscriptions when
``subscribe_at > 0`` (scheduled when the node starts, in topic order), the next churn event
(scheduled by the previous one). Subscriptions with ``subscribe_at = 0`` are not scheduled at
all: they follow their node's start (or recovery, or churn join) immediately. So at one instant
node starts come first, then publications, unsubscriptions and faults, then delayed
subscriptions and churn events. A runtime that executes the timeline in order reproduces this
exactly; the simulator runs the plan's events before any protocol event (message, timer,
failure notice) or snapshot of the same instant.

What the rules are
------------------
* Publishers: with ``publisher = "subscriber"`` a live subscriber of the topic that has not
  left; if there is none (or with ``publisher = "any"``) any live workload node that has not
  left; if there is none at all, that publication id is not issued.
* Unsubscriptions: ``unsubscribe_fraction`` of the workload nodes that hold a subscription at
  ``unsubscribe_at`` each drop one of their subscriptions.
* Fault fractions (crash, leave) pick among the live workload nodes that have not left, other
  than the contact nodes (the contacts run the experiment, Henriques & Pamplona §3.1); with
  ``role``, among the live nodes of that role that have not left, infrastructure included
  (brokertree crashes brokers so); a recover fraction picks among the crashed nodes.
* Named nodes (``nodes = [...]``): **the simulator's rule, for both runtimes.** Named nodes may
  be any node, contacts and infrastructure included; the fault acts on those of them it can act
  on at that instant (crash: live nodes, left ones included; leave: live nodes that have not
  left; recover: crashed nodes), and the plan lists exactly those as the fault's victims,
  deduplicated and sorted. A named node that has not started yet or is already down is not a
  victim. Both runtimes record these resolved victims in the trace's fault row, never the
  named list: a crash naming an already crashed node must not list a victim that did not
  crash, and the two runtimes' traces of one scenario must agree.
* A node that has left or crashed drops the subscriptions it had scheduled; a recovered node
  is a fresh member again (it is no longer counted as left) and resubscribes to its workload
  topics after ``subscribe_at``.
* Partitions are resolved into groups of node ids over every node that exists or is planned at
  that instant (ids ``0 .. max id``); a ``groups`` partition puts unlisted nodes in one more
  group. Empty groups are left out. A node that joins by churn during a partition belongs to no
  group: until the heal it reaches only other such joiners (as in the simulator).
* Churn, from ``at`` to ``until``: gaps are exponential with the given rate; each event is a
  join of a new node (ids continue after ``run.nodes``) with probability ``join_fraction``, else
  a crash (or a graceful leave with ``graceful = true``) of a live workload node that has not
  left, contacts included. An event that finds nobody to remove is skipped.

Content-based workloads
-----------------------
With ``[workload.attributes]`` every publication carries one value per attribute: categorical
attributes take the strings ``s0 .. s<values-1>`` with Zipf popularity (rank ``i`` has weight
``1 / (i + 1) ** zipf``; ``zipf = 0`` is uniform), numeric attributes a uniform float in
``[min, max)``. For a content-based stack every subscription also carries a filter in the
language of :mod:`pubmesh.analysis.metrics` (a conjunction of per-attribute constraints):
``constraints`` distinct attributes are drawn from the schema, and the filter aims at matching
the share ``selectivity`` of the publications. Categorical constraints are chosen first: values
in random order are added to an ``in`` set until their Zipf mass reaches the per-constraint
share ``remaining ** (1 / constraints left)`` (a single value is written as a bare value, i.e.
equality); when numeric constraints follow, the set's mass is at least that share and the
numeric ranges absorb the remainder exactly. A numeric constraint is one range ``{"ge": a,
"lt": a + w}`` whose width is the share of ``[min, max)`` still needed, at a uniform position.
So a filter with at least one numeric constraint matches exactly the target share; a filter of
categorical constraints only matches the share nearest the target that the value masses allow
(each added value brings the mass closer to the target). A log-scale attribute's range lies
between two quantiles of its distribution, so it too matches the target share.

Numeric attributes may be log-uniform (``scale = "log"``: ``exp(U(ln min, ln max))``) and rounded
down (``integer = true``); values stay floats. With ``patterns`` (docs/protocols/chord.md §11's
W1–W4, :class:`pubmesh.scenario.model.FilterPattern`) a filter is instead one pattern drawn by
weight, then per named attribute in name order: ``"eq"`` a value drawn by the attribute's own
popularity, ``"top"`` rank 0, ``"own"`` rank ``node mod values``, ``"lt"``/``"le"``/``"gt"``/
``"ge"`` a threshold drawn like the attribute's values; the filter stream makes every draw.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal, TypeAlias, TypeVar

from pubmesh.proto.core import HistoryRequest, node_seed
from pubmesh.proto.history import parse_history
from pubmesh.scenario.model import AttributeSpec, Fault, FilterPattern, FilterSpec, Scenario

__all__ = [
    "ATTRIBUTE_STREAM",
    "FAULT_STREAM",
    "FILTER_STREAM",
    "WORKLOAD_STREAM",
    "Attributes",
    "ChurnBegin",
    "ChurnEvent",
    "FaultEvent",
    "FaultPlanEvent",
    "Filter",
    "Heal",
    "NodeStart",
    "Partition",
    "PlanEvent",
    "Publication",
    "Subscription",
    "Unsubscription",
    "WorkloadPlan",
    "categorical_value",
    "plan",
    "workload_payload",
]

#: stream ids of the planner's random streams (node streams use ids ≥ 0; the simulator's
#: network, timer and corruption streams are -1, -2 and -5)
WORKLOAD_STREAM, FAULT_STREAM, ATTRIBUTE_STREAM, FILTER_STREAM = -3, -4, -6, -7
#: the stream that draws the late subscribers (``late_fraction``)
LATE_STREAM = -8

#: a publication's attributes: attribute name -> value (str for categorical, float for numeric)
Attributes: TypeAlias = Mapping[str, str | float]
#: a subscription filter: attribute name -> bare value (equality) or {operator: operand}
Filter: TypeAlias = Mapping[str, Any]


# --------------------------------------------------------------------------------------------
# The plan's events
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodeStart:
    """Node ``node`` boots (trace event ``up``) with ``role`` (``"peer"`` for workload nodes)."""

    t: float
    node: int
    role: str


@dataclass(frozen=True, slots=True)
class Subscription:
    """``node`` subscribes to ``topic``; ``filter`` is set for content-based stacks only."""

    t: float
    node: int
    topic: str
    filter: Filter | None = None
    #: a late subscriber's request for the topic's past (``[workload] history``)
    history: HistoryRequest | None = None


@dataclass(frozen=True, slots=True)
class Publication:
    """``publisher`` publishes ``pub_id`` on ``topic``; the payload is
    :func:`workload_payload` of (``pub_id``, ``payload_size``)."""

    t: float
    pub_id: int
    topic: str
    publisher: int
    attributes: Attributes | None = None
    payload_size: int = 0

    def payload(self) -> bytes:
        return workload_payload(self.pub_id, self.payload_size)


@dataclass(frozen=True, slots=True)
class Unsubscription:
    t: float
    node: int
    topic: str


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """A crash, leave or recover fault (``[[faults]]`` number ``index``, from 0) and the nodes
    it acts on (resolved, sorted; possibly none)."""

    t: float
    kind: Literal["crash", "leave", "recover"]
    nodes: tuple[int, ...]
    index: int = 0
    #: a recover that brings the nodes back with their data directories (Fault.durable)
    durable: bool = False


@dataclass(frozen=True, slots=True)
class Partition:
    """From ``t`` on, messages between nodes of different groups are cut (until a heal)."""

    t: float
    groups: tuple[tuple[int, ...], ...]
    index: int = 0
    kind: Literal["partition"] = "partition"


@dataclass(frozen=True, slots=True)
class Heal:
    t: float
    index: int = 0
    kind: Literal["heal"] = "heal"


@dataclass(frozen=True, slots=True)
class ChurnBegin:
    """A churn fault starts: its events follow as :class:`ChurnEvent` rows."""

    t: float
    rate: float
    until: float
    index: int = 0
    kind: Literal["churn"] = "churn"


@dataclass(frozen=True, slots=True)
class ChurnEvent:
    """One churn event: a new node ``node`` joins (role ``"peer"``), or ``node`` crashes or
    leaves gracefully."""

    t: float
    kind: Literal["join", "crash", "leave"]
    node: int
    index: int = 0


FaultPlanEvent: TypeAlias = FaultEvent | Partition | Heal | ChurnBegin | ChurnEvent
PlanEvent: TypeAlias = NodeStart | Subscription | Publication | Unsubscription | FaultPlanEvent


@dataclass(frozen=True)
class WorkloadPlan:
    """Who does what when, in run time (seconds from the run's start), by node id.

    ``events`` is the whole timeline in execution order; the other sequences are its parts,
    in the same order, for runtimes that handle one kind of event at a time."""

    #: nodes at the start (ids 0 .. nodes-1); churn joins get ids from ``nodes`` on
    nodes: int
    roles: Mapping[int, str]
    contacts: tuple[int, ...]
    #: initial start time of every node 0 .. nodes-1
    starts: Mapping[int, float]
    #: workload topics of every workload node (churn joins included), in topic order
    topics: Mapping[int, tuple[str, ...]]
    #: the filter each workload node uses per topic (content-based stacks only, else empty)
    filters: Mapping[int, Mapping[str, Filter]]
    subscribe_at: float
    events: tuple[PlanEvent, ...]
    node_starts: tuple[NodeStart, ...] = ()
    subscriptions: tuple[Subscription, ...] = ()
    publications: tuple[Publication, ...] = ()
    unsubscriptions: tuple[Unsubscription, ...] = ()
    faults: tuple[FaultPlanEvent, ...] = ()
    #: ids of every node the plan ever starts (initial and churn joins)
    all_nodes: tuple[int, ...] = field(default=())
    #: the late subscribers (``late_fraction``): their first subscriptions wait for ``late_at``
    late: frozenset[int] = frozenset()

    def subscribe_time(self, node: int) -> float:
        """When an initial workload node's first subscriptions are due: start + subscribe_at."""
        return self.starts[node] + self.subscribe_at


# --------------------------------------------------------------------------------------------
# Payloads, attributes and filters
# --------------------------------------------------------------------------------------------
def workload_payload(pub_id: int, size: int) -> bytes:
    """A workload publication's payload: the id in 8 bytes, then zero padding, cut to size."""
    return (pub_id.to_bytes(8, "big") + bytes(max(0, size - 8)))[:size]


def categorical_value(rank: int) -> str:
    """The value of rank ``rank`` (0 = most popular) of a categorical attribute."""
    return f"s{rank}"


@dataclass(frozen=True)
class _Schema:
    """An attribute schema ready for drawing: names sorted, cumulative weights precomputed."""

    name: str
    spec: AttributeSpec
    #: categorical: probability of each value rank (sums to 1), and cumulative weights
    masses: tuple[float, ...] = ()
    cumulative: tuple[float, ...] = ()

    @property
    def categorical(self) -> bool:
        return self.spec.values is not None


def _schemas(attributes: Mapping[str, AttributeSpec]) -> list[_Schema]:
    out = []
    for name in sorted(attributes):
        spec = attributes[name]
        if spec.values is None:
            out.append(_Schema(name, spec))
            continue
        weights = [1.0 / math.pow(rank + 1, spec.zipf or 0.0) for rank in range(spec.values)]
        total = math.fsum(weights)
        out.append(
            _Schema(name, spec, tuple(w / total for w in weights), tuple(accumulate(weights)))
        )
    return out


def _draw_attributes(rng: random.Random, schemas: Sequence[_Schema]) -> dict[str, str | float]:
    """One publication's attributes, one draw per attribute in name order."""
    values: dict[str, str | float] = {}
    for schema in schemas:
        spec = schema.spec
        if schema.categorical:
            assert spec.values is not None
            rank = rng.choices(range(spec.values), cum_weights=schema.cumulative)[0]
            values[schema.name] = categorical_value(rank)
        else:
            values[schema.name] = _draw_numeric(rng, spec)
    return values


def _draw_numeric(rng: random.Random, spec: AttributeSpec) -> float:
    """One value of a numeric attribute: uniform or log-uniform in [min, max), rounded down
    if ``integer`` (a float either way, the filter language's one numeric kind)."""
    value = _quantile(spec, rng.random())
    return float(math.floor(value)) if spec.integer else value


def _quantile(spec: AttributeSpec, u: float) -> float:
    """The value below which the share ``u`` of a numeric attribute's values falls."""
    assert spec.min is not None and spec.max is not None
    if spec.scale == "log":
        return math.exp(math.log(spec.min) + u * (math.log(spec.max) - math.log(spec.min)))
    return spec.min + u * (spec.max - spec.min)


def _draw_filter(
    rng: random.Random, schemas: Sequence[_Schema], spec: FilterSpec, node: int
) -> dict[str, Any]:
    """One filter of ``node`` (see "Content-based workloads" in the module docstring)."""
    if spec.patterns:
        return _draw_pattern(rng, schemas, spec.patterns, node)
    chosen = [schemas[i] for i in sorted(rng.sample(range(len(schemas)), spec.constraints))]
    ordered = [s for s in chosen if s.categorical] + [s for s in chosen if not s.categorical]
    remaining = spec.selectivity
    constraints: dict[str, Any] = {}
    for position, schema in enumerate(ordered):
        share = remaining ** (1.0 / (len(ordered) - position))
        if schema.categorical:
            numeric_follow = any(not s.categorical for s in ordered[position + 1 :])
            ranks, realized = _value_set(rng, schema.masses, share, at_least=numeric_follow)
            names = [categorical_value(r) for r in ranks]
            constraints[schema.name] = names[0] if len(names) == 1 else {"in": names}
        elif schema.spec.scale == "log":  # the same share of the values, between quantiles
            u = rng.uniform(0.0, 1.0 - share)
            constraints[schema.name] = {
                "ge": _quantile(schema.spec, u),
                "lt": _quantile(schema.spec, u + share),
            }
            realized = share
        else:
            low_end, high_end = schema.spec.min, schema.spec.max
            assert low_end is not None and high_end is not None
            width = share * (high_end - low_end)
            low = rng.uniform(low_end, high_end - width)
            constraints[schema.name] = {"ge": low, "lt": low + width}
            realized = share
        remaining = min(1.0, remaining / realized) if realized > 0 else 1.0
    return {name: constraints[name] for name in sorted(constraints)}


def _draw_pattern(
    rng: random.Random, schemas: Sequence[_Schema], patterns: Sequence[FilterPattern], node: int
) -> dict[str, Any]:
    """One filter from ``[[workload.filters.patterns]]``: a pattern by weight, then one draw
    per constraint in attribute-name order (:class:`pubmesh.scenario.model.FilterPattern`)."""
    pattern = rng.choices(patterns, weights=[p.weight for p in patterns])[0]
    by_name = {s.name: s for s in schemas}
    constraints: dict[str, Any] = {}
    for name, kind in pattern.constraints:
        schema = by_name[name]
        spec = schema.spec
        if kind == "eq":
            assert spec.values is not None
            rank = rng.choices(range(spec.values), cum_weights=schema.cumulative)[0]
            constraints[name] = categorical_value(rank)
        elif kind == "top":
            constraints[name] = categorical_value(0)
        elif kind == "own":
            assert spec.values is not None
            constraints[name] = categorical_value(node % spec.values)
        else:
            constraints[name] = {kind: _draw_numeric(rng, spec)}
    return constraints


def _value_set(
    rng: random.Random, masses: Sequence[float], share: float, *, at_least: bool
) -> tuple[list[int], float]:
    """Value ranks whose mass is near ``share`` (at least ``share`` if ``at_least``), visited in
    random order; returns (sorted ranks, their mass)."""
    order = list(range(len(masses)))
    rng.shuffle(order)
    chosen: list[int] = []
    total = 0.0
    for rank in order:
        mass = masses[rank]
        if at_least:
            if total >= share:
                break
            chosen.append(rank)
            total += mass
        elif abs(total + mass - share) < abs(total - share):
            chosen.append(rank)
            total += mass
    if not chosen:  # every value alone overshoots by more than the target: the lightest one
        rank = min(range(len(masses)), key=lambda r: (masses[r], r))
        chosen, total = [rank], masses[rank]
    return sorted(chosen), math.fsum(masses[r] for r in chosen)


# --------------------------------------------------------------------------------------------
# The planner
# --------------------------------------------------------------------------------------------
_E = TypeVar("_E")

# heap entry kinds
_START, _SUBSCRIBE, _PUBLISH, _UNSUBSCRIBE, _FAULT, _CHURN = range(6)


class _Planner:
    """The planner's state while it runs the workload (see the module docstring)."""

    def __init__(self, scenario: Scenario) -> None:
        from pubmesh.stacks.base import get_stack

        self.scenario = scenario
        run, workload = scenario.run, scenario.workload
        spec = get_stack(run.stack)
        self.roles: dict[int, str] = dict(spec.infrastructure(run.nodes, scenario.stack_params))
        self.contacts = tuple(spec.contacts(run.nodes, scenario.stack_params))
        self.content_based = spec.content_based
        seed = run.seed
        self.rng = random.Random(node_seed(seed, WORKLOAD_STREAM))
        self.fault_rng = random.Random(node_seed(seed, FAULT_STREAM))
        self.attribute_rng = random.Random(node_seed(seed, ATTRIBUTE_STREAM))
        self.filter_rng = random.Random(node_seed(seed, FILTER_STREAM))
        #: the late subscribers (drawn in run(), from their own stream) and their request
        self.late: set[int] = set()
        self.history = parse_history(workload.history) if workload.history else None
        self.schemas = _schemas(workload.attributes)

        self.topic_names = [f"t{i}" for i in range(workload.topics)]
        if workload.topic_popularity == "uniform":
            self.weights = [1.0] * workload.topics
        else:
            self.weights = [1.0 / math.pow(r + 1, workload.zipf_s) for r in range(workload.topics)]
        self.cum_weights = list(accumulate(self.weights))

        self.heap: list[tuple[float, int, int, tuple[Any, ...]]] = []
        self.seq = 0
        self.events: list[PlanEvent] = []
        self.next_node = run.nodes
        self.topics: dict[int, tuple[str, ...]] = {}
        self.filters: dict[int, dict[str, Filter]] = {}
        self.starts: dict[int, float] = {}

        # live state
        self.alive: set[int] = set()
        self.crashed: set[int] = set()
        self.left: set[int] = set()
        self.incarnation: dict[int, int] = {}
        self.node_subs: dict[int, set[str]] = {}
        #: live subscribers per topic, sorted (the publisher candidates of that topic)
        self.topic_subs: dict[str, _SortedIds] = {}
        #: live workload nodes that have not left, sorted (publishers of last resort, churn
        #: victims)
        self.members = _SortedIds()

    # ---------------------------------------------------------------- scheduling
    def push(self, t: float, kind: int, *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, args))

    def run(self) -> WorkloadPlan:
        s = self.scenario
        run, workload = s.run, s.workload
        workload_nodes = [i for i in range(run.nodes) if i not in self.roles]
        starts: dict[int, float] = dict.fromkeys(self.roles, 0.0)
        for node in workload_nodes:
            spread = run.start_spread
            starts[node] = self.rng.uniform(0.0, spread) if spread > 0 else 0.0
        for node in workload_nodes:
            self.assign_topics(node)
        if workload.late_fraction > 0:
            late_rng = random.Random(node_seed(run.seed, LATE_STREAM))
            count = round(workload.late_fraction * len(workload_nodes))
            self.late = set(late_rng.sample(workload_nodes, count))
        self.starts = {node: starts[node] for node in sorted(starts)}
        # The starts are the first entries, sequence numbers 1 .. len(starts), in (time, node)
        # order (a stable sort by time of the ids in order): they run from this list, merged
        # with the heap by the same (time, sequence) key, instead of a million pushes and
        # pops on a heap of a million entries.
        first: list[tuple[float, int, int, tuple[Any, ...]]] = [
            (starts[node], seq, _START, (node,))
            for seq, node in enumerate(sorted(sorted(starts), key=starts.__getitem__), 1)
        ]
        self.seq = len(first)
        for i in range(workload.publications):
            self.push(workload.publish_start + i / workload.publish_rate, _PUBLISH, i)
        if workload.unsubscribe_fraction > 0:
            self.push(workload.unsubscribe_at, _UNSUBSCRIBE)
        for index, fault in enumerate(s.faults):
            self.push(fault.at, _FAULT, index)

        heap = self.heap
        next_first = 0
        while next_first < len(first) or heap:
            if next_first < len(first) and (not heap or first[next_first] < heap[0]):
                t, _seq, kind, args = first[next_first]
                next_first += 1
            else:
                t, _seq, kind, args = heapq.heappop(heap)
            if kind == _START:
                node = args[0]
                self.start(t, node, NodeStart(t, node, self.roles.get(node, "peer")))
            elif kind == _SUBSCRIBE:
                node, topic, incarnation, history = args
                if self.incarnation.get(node) == incarnation and node in self.alive:
                    self.subscribe(t, node, topic, history)
            elif kind == _PUBLISH:
                self.publish(t, args[0])
            elif kind == _UNSUBSCRIBE:
                self.unsubscribe_some(t)
            elif kind == _FAULT:
                self.fault(t, args[0])
            else:
                self.churn(t, args[0])
        return self.result()

    def result(self) -> WorkloadPlan:
        events = tuple(self.events)
        by_kind: dict[type, list[PlanEvent]] = {}
        faults: list[FaultPlanEvent] = []
        for event in events:
            by_kind.setdefault(type(event), []).append(event)
            if isinstance(event, FaultEvent | Partition | Heal | ChurnBegin | ChurnEvent):
                faults.append(event)

        def part(kind: type[_E]) -> tuple[_E, ...]:
            return tuple(e for e in by_kind.get(kind, ()) if isinstance(e, kind))

        return WorkloadPlan(
            nodes=self.scenario.run.nodes,
            roles=self.roles,
            contacts=self.contacts,
            starts=self.starts,
            topics=self.topics,
            filters=self.filters,
            subscribe_at=self.scenario.workload.subscribe_at,
            events=events,
            node_starts=part(NodeStart),
            subscriptions=part(Subscription),
            publications=part(Publication),
            unsubscriptions=part(Unsubscription),
            faults=tuple(faults),
            all_nodes=tuple(range(self.next_node)),
            late=frozenset(self.late),
        )

    # ---------------------------------------------------------------- nodes
    def assign_topics(self, node: int) -> None:
        """Draw a workload node's topics (workload stream) and, for content-based stacks, one
        filter per topic (filter stream)."""
        k = self.scenario.workload.subscriptions_per_node
        chosen: list[str] = []
        pool = list(range(len(self.topic_names)))
        weights = list(self.weights)
        draw = self.rng.random
        for _ in range(k):
            # self.rng.choices(range(len(pool)), weights=weights)[0], spelt out as CPython's
            # random.py computes it (the same draw, the same index) without its per-call setup
            cum_weights = list(accumulate(weights))
            index = bisect(cum_weights, draw() * (cum_weights[-1] + 0.0), 0, len(pool) - 1)
            chosen.append(self.topic_names[pool.pop(index)])
            weights.pop(index)
        topics = tuple(sorted(chosen, key=lambda t: int(t[1:]))) if k > 1 else tuple(chosen)
        self.topics[node] = topics
        if self.content_based and self.schemas:
            spec = self.scenario.workload.filters
            self.filters[node] = {
                topic: _draw_filter(self.filter_rng, self.schemas, spec, node) for topic in topics
            }

    def start(self, t: float, node: int, event: PlanEvent | None) -> None:
        """Boot ``node`` (a new incarnation), record ``event`` (none for a recovery, whose
        fault event names the nodes) and schedule the node's subscriptions."""
        self.incarnation[node] = self.incarnation.get(node, -1) + 1
        self.alive.add(node)
        self.crashed.discard(node)
        self.left.discard(node)
        if node not in self.roles:
            self.members.add(node)
        if event is not None:
            self.events.append(event)
        delay = self.scenario.workload.subscribe_at
        incarnation = self.incarnation[node]
        if node in self.late and incarnation == 0:
            # a late subscriber's first subscriptions, with its history request
            at = max(self.scenario.workload.late_at, t + delay)
            for topic in self.topics.get(node, ()):
                self.push(at, _SUBSCRIBE, node, topic, incarnation, self.history)
            return
        for topic in self.topics.get(node, ()):
            if delay > 0:
                self.push(t + delay, _SUBSCRIBE, node, topic, incarnation, None)
            else:
                self.subscribe(t, node, topic)

    def subscribe(
        self, t: float, node: int, topic: str, history: HistoryRequest | None = None
    ) -> None:
        if node in self.left:
            return  # a node that left issues no more subscriptions
        mine = self.node_subs.setdefault(node, set())
        if topic in mine:
            return
        mine.add(topic)
        subscribers = self.topic_subs.get(topic)
        if subscribers is None:
            subscribers = self.topic_subs[topic] = _SortedIds()
        subscribers.add(node)
        self.events.append(
            Subscription(t, node, topic, self.filters.get(node, {}).get(topic), history)
        )

    def end_subscriptions(self, node: int) -> None:
        for topic in self.node_subs.pop(node, set()):
            self.topic_subs[topic].discard(node)

    def crash(self, nodes: Sequence[int]) -> None:
        for node in nodes:
            self.alive.discard(node)
            self.crashed.add(node)
            self.members.discard(node)
            self.end_subscriptions(node)

    def leave(self, nodes: Sequence[int]) -> None:
        for node in nodes:
            self.left.add(node)
            self.members.discard(node)
            self.end_subscriptions(node)

    # ---------------------------------------------------------------- workload
    def publish(self, t: float, pub_id: int) -> None:
        w = self.scenario.workload
        attributes = _draw_attributes(self.attribute_rng, self.schemas) if self.schemas else None
        topic = self.rng.choices(self.topic_names, cum_weights=self.cum_weights)[0]
        candidates: list[int] = []
        if w.publisher == "subscriber" and topic in self.topic_subs:
            # a node that left has no subscriptions: these are live and have not left
            candidates = self.topic_subs[topic].ordered()
        if not candidates:
            candidates = self.members.ordered()
        if not candidates:
            return
        publisher = candidates[self.rng.randrange(len(candidates))]
        self.events.append(Publication(t, pub_id, topic, publisher, attributes, w.payload_size))

    def unsubscribe_some(self, t: float) -> None:
        w = self.scenario.workload
        holders = sorted(n for n, mine in self.node_subs.items() if mine and n not in self.roles)
        count = round(w.unsubscribe_fraction * len(holders))
        for node in sorted(self.rng.sample(holders, count)):
            mine = sorted(self.node_subs[node])
            topic = mine[self.rng.randrange(len(mine))]
            self.node_subs[node].discard(topic)
            self.topic_subs[topic].discard(node)
            self.events.append(Unsubscription(t, node, topic))

    # ---------------------------------------------------------------- faults
    def pick(self, fault: Fault, pool: set[int] | list[int]) -> list[int]:
        if fault.nodes:
            return sorted(fault.nodes)
        ordered = sorted(pool)
        count = round((fault.fraction or 0.0) * len(ordered))
        return sorted(self.fault_rng.sample(ordered, count))

    def fault(self, t: float, index: int) -> None:
        fault = self.scenario.faults[index]
        contacts = set(self.contacts)
        if fault.kind in ("crash", "leave"):
            if fault.role:
                pool = [
                    n
                    for n in sorted(self.alive - self.left)
                    if self.roles.get(n, "peer") == fault.role
                ]
            else:
                pool = [n for n in self.members.ordered() if n not in contacts]
            picked = set(self.pick(fault, pool))
            if fault.kind == "crash":
                victims = sorted(n for n in picked if n in self.alive)
                self.crash(victims)
            else:
                victims = sorted(n for n in picked if n in self.alive and n not in self.left)
                self.leave(victims)
            self.events.append(FaultEvent(t, fault.kind, tuple(victims), index))
        elif fault.kind == "recover":
            back = sorted(n for n in set(self.pick(fault, self.crashed)) if n in self.crashed)
            self.events.append(FaultEvent(t, "recover", tuple(back), index, fault.durable))
            for node in back:
                self.start(t, node, None)
        elif fault.kind == "partition":
            groups = self.partition(fault)
            self.events.append(Partition(t, groups, index))
        elif fault.kind == "heal":
            self.events.append(Heal(t, index))
        else:  # churn
            assert fault.until is not None
            self.schedule_churn(fault, index, t)
            self.events.append(ChurnBegin(t, fault.rate, fault.until, index))

    def partition(self, fault: Fault) -> tuple[tuple[int, ...], ...]:
        everyone = list(range(max(self.next_node, self.scenario.run.nodes)))
        if fault.groups:
            assignment = dict.fromkeys(everyone, len(fault.groups))
            for group_index, group in enumerate(fault.groups):
                for node in group:
                    assignment[node] = group_index
        elif fault.parts:
            assignment = {node: self.fault_rng.randrange(fault.parts) for node in everyone}
        else:
            count = round((fault.fraction or 0.0) * len(everyone))
            side = set(self.fault_rng.sample(everyone, count))
            assignment = {node: int(node in side) for node in everyone}
        groups: dict[int, list[int]] = {}
        for node, side_index in sorted(assignment.items()):
            groups.setdefault(side_index, []).append(node)
        return tuple(tuple(groups[g]) for g in sorted(groups))

    def schedule_churn(self, fault: Fault, index: int, after: float) -> None:
        gap = self.fault_rng.expovariate(fault.rate)
        t = after + gap
        if fault.until is None or t > fault.until:
            return
        self.push(t, _CHURN, index)

    def churn(self, t: float, index: int) -> None:
        fault = self.scenario.faults[index]
        rng = self.fault_rng
        if rng.random() < fault.join_fraction:
            node = self.next_node
            self.next_node += 1
            self.assign_topics(node)
            self.start(t, node, ChurnEvent(t, "join", node, index))
        else:
            pool = self.members.ordered()
            if not pool:
                self.schedule_churn(fault, index, t)
                return
            node = pool[rng.randrange(len(pool))]
            if fault.graceful:
                self.leave([node])
                self.events.append(ChurnEvent(t, "leave", node, index))
            else:
                self.crash([node])
                self.events.append(ChurnEvent(t, "crash", node, index))
        self.schedule_churn(fault, index, t)


class _SortedIds:
    """A set of node ids read as a sorted list, sorted only when read after a change.

    The planner adds every node as it starts (in start-time order, random in id) and reads
    the list only to draw a publisher or a churn victim. Kept sorted on every insertion
    (``bisect.insort``), the list cost a memmove of half of itself per node: quadratic, and
    most of a 10^6-node plan (21 s of CPU for 400,000 nodes). Here an addition is appended,
    a removal leaves its id in the list until the next read, and a read filters and sorts
    once (Timsort merges the sorted prefix with the appended tail), so a run of starts costs
    one sort. The list a read returns is the one the sorted insertions kept, so plans are
    unchanged."""

    __slots__ = ("_gone", "_ids", "_list", "_tail")

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._list: list[int] = []  # the ids (each once) and the removed ids of _gone
        self._tail = False  # ids appended after the sorted prefix
        self._gone: set[int] = set()  # removed ids still in the list

    def add(self, node: int) -> None:
        if node in self._ids:
            return
        self._ids.add(node)
        if node in self._gone:
            self._gone.discard(node)  # still in the list, in its place
        else:
            self._list.append(node)
            self._tail = True

    def discard(self, node: int) -> None:
        if node in self._ids:
            self._ids.discard(node)
            self._gone.add(node)

    def __contains__(self, node: object) -> bool:
        return node in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def ordered(self) -> list[int]:
        """The ids, ascending (the caller must not change the list)."""
        if self._gone:
            gone = self._gone
            self._list = [n for n in self._list if n not in gone]
            gone.clear()
        if self._tail:
            self._list.sort()
            self._tail = False
        return self._list


def plan(scenario: Scenario) -> WorkloadPlan:
    """The workload of ``scenario``: a pure, deterministic function of the scenario and its
    seed (see the module docstring)."""
    return _Planner(scenario).run()
