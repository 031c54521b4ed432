"""The shared workload planner (pubmesh.scenario.workload): one plan, consumed by both runtimes.

* plan() is a pure function of the scenario and its seed: equal plans for the same seed
  (also through the scenario's canonical text), different plans for different seeds;
* what a simulated run records in its trace (node life events with roles, subscriptions with
  their filters and ends, publications with publishers and attributes, fault rows with their
  victims) is exactly what the plan says, for a scenario with every fault kind and for one
  with named nodes that are down, not started yet, contacts or infrastructure;
* content-based workloads: attributes are in range and single-kind, filters are valid in the
  filter language of pubmesh.analysis.metrics, and the share of 2,000 publications a filter
  matches is within a binomial tolerance of the target selectivity;
* bad [workload.attributes] / [workload.filters] values: `pubmesh sim` exits 2 with one line
  naming the file and the key.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pyarrow.parquet as pq
import pytest

from pubmesh.errors import ScenarioError
from pubmesh.proto.core import Input, NodeContext, Output, Publish, Subscribe
from pubmesh.scenario.model import Scenario, load_scenario, parse_scenario
from pubmesh.scenario.workload import (
    ChurnBegin,
    ChurnEvent,
    FaultEvent,
    Heal,
    NodeStart,
    Partition,
    Publication,
    Subscription,
    Unsubscription,
    WorkloadPlan,
    categorical_value,
    plan,
)
from pubmesh.sim.engine import Simulation
from pubmesh.stacks.base import StackSpec
from support.probestacks import ProbeNode, ProbeParams, register_test_stack


# ------------------------------------------------------------------------------------------
# A test-only content-based stack: the probe ring, remembering what the workload handed it
# ------------------------------------------------------------------------------------------
class ContentProbeNode(ProbeNode):
    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.filters: dict[str, Mapping[str, Any] | None] = {}
        self.published: dict[int, Mapping[str, Any] | None] = {}

    def handle(self, event: Input, now: float) -> list[Output]:
        if isinstance(event, Subscribe):
            self.filters[event.topic] = event.filter
        elif isinstance(event, Publish):
            self.published[event.pub_id] = event.attributes
        return super().handle(event, now)


register_test_stack(
    StackSpec(
        name="probe-content",
        params_type=ProbeParams,
        create=ContentProbeNode,
        infrastructure=lambda n, p: {0: "broker"},
        contacts=lambda n, p: (0, 1),
        content_based=True,
        description="test-only content-based ring (probe with filters and attributes)",
    )
)

ATTRIBUTES = """
[workload.attributes]
symbol = { values = 20, zipf = 1.0 }
price = { min = 0.0, max = 100.0 }
[workload.filters]
constraints = 2
selectivity = 0.1
"""

#: every fault kind, recoveries of churn victims, delayed subscriptions, unsubscriptions
FAULTY = """
[run]
stack = "probe-content"
nodes = 30
seed = 3
duration = 30.0
start_spread = 4.0
[network]
latency = { dist = "uniform", min = 0.01, max = 0.05 }
detection_delay = 0.5
[workload]
topics = 6
topic_popularity = "zipf"
subscriptions_per_node = 2
subscribe_at = 0.7
publications = 120
publish_start = 5.0
publish_rate = 8.0
unsubscribe_fraction = 0.3
unsubscribe_at = 9.0
[[faults]]
at = 8.0
kind = "crash"
fraction = 0.25
[[faults]]
at = 10.0
kind = "churn"
rate = 2.0
until = 20.0
join_fraction = 0.5
[[faults]]
at = 12.0
kind = "recover"
fraction = 0.5
[[faults]]
at = 14.0
kind = "partition"
parts = 3
[[faults]]
at = 16.0
kind = "heal"
[[faults]]
at = 17.0
kind = "leave"
fraction = 0.2
[[faults]]
at = 18.0
kind = "churn"
rate = 3.0
until = 25.0
graceful = true
join_fraction = 0.3
[stack.probe-content]
ring_size = 30
"""

#: named nodes: already crashed (5), not started yet (late), the contacts (0 is also the
#: infrastructure node, 1), a left node crashed by name, a live node named for recovery
NAMED = """
[run]
stack = "probe-content"
nodes = 12
seed = 8
duration = 20.0
start_spread = 0.0
[workload]
topics = 2
subscriptions_per_node = 1
publications = 40
publish_start = 1.0
publish_rate = 4.0
[[faults]]
at = 2.0
kind = "crash"
nodes = [5]
[[faults]]
at = 3.0
kind = "crash"
nodes = [5, 6, 6, 1]
[[faults]]
at = 4.0
kind = "leave"
nodes = [7, 5, 0]
[[faults]]
at = 5.0
kind = "crash"
nodes = [7]
[[faults]]
at = 6.0
kind = "recover"
nodes = [5, 8, 7]
[[faults]]
at = 7.0
kind = "leave"
nodes = [7]
[[faults]]
at = 8.0
kind = "partition"
groups = [[0, 1, 2], [3, 4]]
[[faults]]
at = 9.0
kind = "heal"
[stack.probe-content]
ring_size = 12
"""


def table(run_dir: Path, name: str) -> list[dict[str, Any]]:
    path = run_dir / name / "part-00000.parquet"
    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist() if path.exists() else []
    return rows


def simulate(scenario: Scenario, run_dir: Path) -> Simulation:
    sim = Simulation(scenario, run_dir)
    sim.run()
    sim.close()
    return sim


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# ------------------------------------------------------------------------------------------
# Determinism
# ------------------------------------------------------------------------------------------
def test_same_scenario_and_seed_same_plan_other_seed_other_plan() -> None:
    scenario = parse_scenario(FAULTY + ATTRIBUTES)
    first = plan(scenario)
    assert plan(scenario) == first
    assert plan(parse_scenario(scenario.text)) == first  # canonical text, attributes sorted
    assert first.publications and first.subscriptions and first.faults
    other = plan(scenario.with_overrides(["run.seed=4"]))
    assert other != first
    assert other.publications != first.publications
    assert other.starts != first.starts


def test_timeline_is_in_time_order_and_its_parts_add_up() -> None:
    p = plan(parse_scenario(FAULTY + ATTRIBUTES))
    times = [e.t for e in p.events]
    assert times == sorted(times)
    parts = (p.node_starts, p.subscriptions, p.publications, p.unsubscriptions, p.faults)
    assert sum(len(part) for part in parts) == len(p.events)
    joins = [e.node for e in p.faults if isinstance(e, ChurnEvent) and e.kind == "join"]
    assert joins == list(range(30, 30 + len(joins))) and joins, "churn joins get new ids"
    assert p.all_nodes == tuple(range(30 + len(joins)))
    assert {s.node for s in p.node_starts} == set(range(30))
    assert all(s.role == ("broker" if s.node == 0 else "peer") for s in p.node_starts)


def test_no_attributes_means_no_attribute_draws() -> None:
    """Attributes and filters are drawn from streams of their own: adding them to a
    content-based scenario changes none of its other draws. (A topic-based stack refuses
    [workload.attributes] and [workload.filters] outright: tests/sim/test_scenario.py.)"""
    plain = plan(parse_scenario(FAULTY))
    assert all(p.attributes is None for p in plain.publications)
    assert all(s.filter is None for s in plain.subscriptions)
    with_attributes = plan(parse_scenario(FAULTY + ATTRIBUTES))
    strip = [(p.t, p.pub_id, p.topic, p.publisher) for p in with_attributes.publications]
    assert strip == [(p.t, p.pub_id, p.topic, p.publisher) for p in plain.publications]
    subscribed = [(s.t, s.node, s.topic) for s in with_attributes.subscriptions]
    assert subscribed == [(s.t, s.node, s.topic) for s in plain.subscriptions]
    assert all(s.filter is not None for s in with_attributes.subscriptions)
    assert all(p.attributes for p in with_attributes.publications)


# ------------------------------------------------------------------------------------------
# The plan is what the simulator does
# ------------------------------------------------------------------------------------------
def expected_trace(p: WorkloadPlan, duration: float) -> dict[str, list[Any]]:
    """The rows a run of plan ``p`` must write: nodes, subscriptions, publications, faults."""
    roles = dict(p.roles)
    nodes: list[tuple[int, float, str, str]] = []
    subscriptions: list[tuple[int, str, Any, float, float | None]] = []
    publications: list[tuple[int, int, str, Any, float, int]] = []
    faults: list[tuple[float, str, Any]] = []
    open_subs: dict[tuple[int, str], tuple[float, Any]] = {}

    def end(node: int, t: float) -> None:
        for key in sorted(k for k in open_subs if k[0] == node):
            t_start, filter_ = open_subs.pop(key)
            subscriptions.append((node, key[1], filter_, t_start, t))

    for e in p.events:
        if e.t > duration:
            break
        if isinstance(e, NodeStart):
            nodes.append((e.node, e.t, "up", e.role))
        elif isinstance(e, Subscription):
            open_subs[(e.node, e.topic)] = (e.t, e.filter)
        elif isinstance(e, Unsubscription):
            t_start, filter_ = open_subs.pop((e.node, e.topic))
            subscriptions.append((e.node, e.topic, filter_, t_start, e.t))
        elif isinstance(e, Publication):
            publications.append(
                (e.pub_id, e.publisher, e.topic, e.attributes, e.t, len(e.payload()))
            )
        elif isinstance(e, FaultEvent):
            faults.append((e.t, e.kind, {"nodes": list(e.nodes)}))
            event = {"crash": "crash", "leave": "leave", "recover": "recover"}[e.kind]
            for node in e.nodes:
                nodes.append((node, e.t, event, roles.get(node, "peer")))
                if e.kind != "recover":
                    end(node, e.t)
        elif isinstance(e, Partition):
            faults.append((e.t, "partition", {"sizes": [len(g) for g in e.groups]}))
        elif isinstance(e, Heal):
            faults.append((e.t, "heal", {}))
        elif isinstance(e, ChurnBegin):
            faults.append((e.t, "churn", {"rate": e.rate, "until": e.until}))
        elif isinstance(e, ChurnEvent):
            faults.append((e.t, f"churn-{e.kind}", {"node": e.node}))
            nodes.append((e.node, e.t, "up" if e.kind == "join" else e.kind, "peer"))
            if e.kind != "join":
                end(e.node, e.t)
    for (node, topic), (t_start, filter_) in open_subs.items():
        subscriptions.append((node, topic, filter_, t_start, None))
    return {
        "nodes": sorted(nodes),
        "subscriptions": sorted(subscriptions, key=repr),
        "publications": sorted(publications, key=repr),
        "faults": sorted(faults, key=repr),
    }


def recorded_trace(run_dir: Path) -> dict[str, list[Any]]:
    return {
        "nodes": sorted(
            (r["node"], r["t"], r["event"], r["role"]) for r in table(run_dir, "nodes")
        ),
        "subscriptions": sorted(
            (
                (r["node"], r["topic"], loads(r["filter"]), r["t_start"], r["t_end"])
                for r in table(run_dir, "subscriptions")
            ),
            key=repr,
        ),
        "publications": sorted(
            (
                (r["pub_id"], r["publisher"], r["topic"], loads(r["attributes"]), r["t"], r["size"])
                for r in table(run_dir, "publications")
            ),
            key=repr,
        ),
        "faults": sorted(
            ((r["t"], r["kind"], loads(r["detail"])) for r in table(run_dir, "faults")), key=repr
        ),
    }


def as_json(value: Any) -> Any:
    """Tuples and mappings as JSON gives them back (lists and dicts)."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("text", [FAULTY + ATTRIBUTES, NAMED + ATTRIBUTES], ids=["faulty", "named"])
def test_the_trace_of_a_simulated_run_is_the_plan(text: str, tmp_path: Path) -> None:
    scenario = parse_scenario(text)
    p = plan(scenario)
    sim = simulate(scenario, tmp_path)
    expected = expected_trace(p, scenario.run.duration)
    recorded = recorded_trace(tmp_path)
    for name in ("nodes", "subscriptions", "publications", "faults"):
        want = sorted(as_json(expected[name]), key=repr)
        got = sorted(as_json(recorded[name]), key=repr)
        assert got == want, f"{name}: only planned {[w for w in want if w not in got][:4]}, " + (
            f"only recorded {[g for g in got if g not in want][:4]}"
        )
    # the stack itself got the filters and the attributes
    for node, obj in sim.nodes.items():
        assert isinstance(obj, ContentProbeNode)
        for topic, filter_ in obj.filters.items():
            assert filter_ == p.filters[node][topic]
    by_id = {pub.pub_id: pub for pub in p.publications}
    handed = {i: a for obj in sim.nodes.values() for i, a in obj.published.items()}  # type: ignore[attr-defined]
    assert handed and all(by_id[i].attributes == a for i, a in handed.items())


def test_named_faults_act_on_and_list_the_nodes_they_can_act_on() -> None:
    """The simulator's rule for both runtimes: named nodes may be any node (contacts and
    infrastructure too); the victims are those the fault can act on at that instant."""
    p = plan(parse_scenario(NAMED))
    faults = [(f.t, f.kind, f.nodes) for f in p.faults if isinstance(f, FaultEvent)]
    assert faults == [
        (2.0, "crash", (5,)),
        (3.0, "crash", (1, 6)),  # 5 is down already, 6 named twice
        (4.0, "leave", (0, 7)),  # 5 is down; 0 is the infrastructure node and a contact
        (5.0, "crash", (7,)),  # a left node can still crash
        (6.0, "recover", (5, 7)),  # 8 is alive: nothing to recover
        (7.0, "leave", (7,)),  # recovered: a member again, so it can leave again
    ]
    (partition,) = [f for f in p.faults if isinstance(f, Partition)]
    assert partition.groups == ((0, 1, 2), (3, 4), tuple(range(5, 12)))


def test_net_workload_is_the_same_plan_for_the_cluster() -> None:
    from pubmesh.net.cluster import workload as net

    scenario = parse_scenario(
        NAMED.split("[[faults]]")[0] + '[[faults]]\nat = 3.0\nkind = "crash"\nfraction = 0.5\n'
    )
    assert net.plan(scenario) == plan(scenario)
    # the cluster plays recover faults too (it starts the killed processes again); a
    # partition needs network namespaces
    with pytest.raises(ScenarioError, match=r"#7 kind: a partition cuts real links .* --netns"):
        net.plan(parse_scenario(NAMED))
    recovering = parse_scenario(NAMED.split("[[faults]]\nat = 8.0")[0])
    assert any(f.kind == "recover" for f in recovering.faults)
    assert net.plan(recovering) == plan(recovering)


# ------------------------------------------------------------------------------------------
# Content-based workloads
# ------------------------------------------------------------------------------------------
def matches(filter_: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    """The filter language of pubmesh.analysis.metrics, for numbers and strings."""

    def holds(op: str, operand: Any, value: Any) -> bool:
        if op == "in":
            return value in operand
        if op == "prefix":
            return isinstance(value, str) and value.startswith(operand)
        compare = {
            "eq": value == operand,
            "ne": value != operand,
            "lt": value < operand,
            "le": value <= operand,
            "gt": value > operand,
            "ge": value >= operand,
        }
        return compare[op]

    for name, constraint in filter_.items():
        if name not in attributes:
            return False
        ops = constraint if isinstance(constraint, dict) else {"eq": constraint}
        if not all(holds(op, operand, attributes[name]) for op, operand in ops.items()):
            return False
    return True


def content_plan(selectivity: float, constraints: int = 2, attributes: str = "") -> WorkloadPlan:
    schema = attributes or (
        "[workload.attributes]\nsymbol = { values = 20, zipf = 1.0 }\n"
        "price = { min = 0.0, max = 100.0 }\n"
    )
    text = (
        '[run]\nstack = "probe-content"\nnodes = 21\nseed = 12\nduration = 300.0\n'
        "[workload]\ntopics = 1\npublications = 2000\npublish_start = 1.0\n"
        "publish_rate = 10.0\n"
        f"{schema}[workload.filters]\nconstraints = {constraints}\n"
        f"selectivity = {selectivity}\n[stack.probe-content]\nring_size = 21\n"
    )
    return plan(parse_scenario(text))


def test_attributes_are_in_range_and_single_kind() -> None:
    p = content_plan(0.1)
    assert len(p.publications) == 2000
    symbols = {categorical_value(i) for i in range(20)}
    counts: dict[str, int] = {}
    for pub in p.publications:
        assert pub.attributes is not None and set(pub.attributes) == {"price", "symbol"}
        price, symbol = pub.attributes["price"], pub.attributes["symbol"]
        assert isinstance(price, float) and 0.0 <= price < 100.0
        assert isinstance(symbol, str) and symbol in symbols
        counts[symbol] = counts.get(symbol, 0) + 1
    # Zipf(1) popularity: s0 twice as often as s1 (binomial: 5 sd of the difference)
    n0, n1 = counts["s0"], counts["s1"]
    assert abs(n0 - 2 * n1) < 5 * math.sqrt(n0 + 4 * n1)


def test_filters_are_valid_in_the_filter_language() -> None:
    p = content_plan(0.1)
    symbols = {categorical_value(i) for i in range(20)}
    assert len(p.subscriptions) == 20  # the broker (node 0) does not subscribe
    for sub in p.subscriptions:
        assert sub.filter is not None and len(sub.filter) == 2
        json.dumps(sub.filter)  # JSON-able
        symbol, price = sub.filter["symbol"], sub.filter["price"]
        if isinstance(symbol, str):
            assert symbol in symbols
        else:
            assert set(symbol) == {"in"} and len(symbol["in"]) >= 2
            assert set(symbol["in"]) <= symbols
        assert set(price) == {"ge", "lt"}
        assert all(isinstance(v, float) for v in price.values())
        assert 0.0 <= price["ge"] < price["lt"] <= 100.0 + 1e-9


#: targets checked, each over every one of the 20 filters of its plan
TARGETS = (0.5, 0.2, 0.1, 0.05)
#: family-wise false-failure probability of the selectivity checks below
ALPHA = 1e-3


@pytest.mark.parametrize(
    ("constraints", "schema"),
    [
        (2, ""),  # a Zipf categorical set and a numeric range that absorbs the remainder
        (1, "[workload.attributes]\nprice = { min = -5.0, max = 5.0 }\n"),
    ],
    ids=["categorical+numeric", "numeric"],
)
def test_measured_selectivity_is_the_target(constraints: int, schema: str) -> None:
    """Every filter with a numeric constraint matches each publication with probability equal
    to the target, independently across publications, so its match count over n = 2,000
    publications is Binomial(n, target): the share is within z·sqrt(p(1-p)/n) of the target,
    z chosen (Bonferroni, two-sided) so that all len(TARGETS)·20 checks pass together with
    probability ≥ 1 - ALPHA when the planner is right."""
    checks = len(TARGETS) * 20
    z = NormalDist().inv_cdf(1 - ALPHA / (2 * checks))
    for target in TARGETS:
        p = content_plan(target, constraints, schema)
        pubs = [pub.attributes for pub in p.publications]
        n = len(pubs)
        assert n == 2000
        tolerance = z * math.sqrt(target * (1 - target) / n)
        filters = [sub.filter for sub in p.subscriptions]
        assert len(filters) == 20
        for filter_ in filters:
            assert filter_ is not None
            share = sum(matches(filter_, a) for a in pubs if a is not None) / n
            assert abs(share - target) <= tolerance, (
                f"target {target}: filter {filter_} matched {share:.4f} "
                f"(tolerance ±{tolerance:.4f}, z={z:.2f})"
            )


def test_categorical_only_filters_match_their_value_mass() -> None:
    """Without a numeric constraint a filter matches the Zipf mass of its value set, which is
    within half the heaviest value's mass of the target; the measured share is within the
    binomial tolerance of that mass."""
    schema = "[workload.attributes]\nsymbol = { values = 20, zipf = 1.0 }\n"
    weights = [1.0 / (rank + 1) for rank in range(20)]
    masses = {categorical_value(r): w / math.fsum(weights) for r, w in enumerate(weights)}
    z = NormalDist().inv_cdf(1 - ALPHA / (2 * 3 * 20))
    for target in (0.5, 0.3, 0.1):
        p = content_plan(target, 1, schema)
        pubs = [pub.attributes for pub in p.publications]
        for sub in p.subscriptions:
            assert sub.filter is not None
            constraint = sub.filter["symbol"]
            values = [constraint] if isinstance(constraint, str) else constraint["in"]
            mass = math.fsum(masses[v] for v in values)
            assert abs(mass - target) <= max(masses.values()) / 2 + 1e-12, (target, values)
            share = sum(matches(sub.filter, a) for a in pubs if a is not None) / len(pubs)
            assert abs(share - mass) <= z * math.sqrt(mass * (1 - mass) / len(pubs))


# ------------------------------------------------------------------------------------------
# Bad keys: one line from the real CLI
# ------------------------------------------------------------------------------------------
#: a content-based stack: attribute and filter tables are refused outright on a topic-based
#: one (tests/sim/test_scenario.py)
BASE = '[run]\nstack = "chord"\nnodes = 5\n'


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (
            "[workload.attributes]\nprice = { min = 5.0, max = 1.0 }\n",
            "[workload.attributes] price: need min < max",
        ),
        ("[workload.attributes]\nsymbol = { values = 0 }\n", "[workload.attributes] symbol:"),
        (
            "[workload.attributes]\nprice = { min = 0.0, mx = 1.0 }\n",
            "[workload.attributes] price mx: unknown key",
        ),
        ("[workload.attributes]\nprice = 3\n", "[workload.attributes] price: must be a table"),
        (
            '[workload.attributes]\nsymbol = { values = "many" }\n',
            "[workload.attributes] symbol values: must be an integer",
        ),
        (
            "[workload.attributes]\nsymbol = { values = 4, min = 0.0, max = 1.0 }\n",
            "[workload.attributes] symbol: give either values",
        ),
        (
            "[workload.attributes]\nsymbol = { values = 4, zipf = -1.0 }\n",
            "[workload.attributes] symbol: zipf must be ≥ 0",
        ),
        (
            "[workload.attributes]\np = { min = 0.0, max = 1.0 }\n[workload.filters]\n"
            "selectivity = 1.5\n",
            "[workload.filters]: selectivity must be in (0, 1]",
        ),
        (
            "[workload.attributes]\np = { min = 0.0, max = 1.0 }\n[workload.filters]\n"
            "constraints = 2\n",
            "[workload.filters] constraints: must be at most the number of attributes (1)",
        ),
        (
            "[workload.attributes]\np = { min = 0.0, max = 1.0 }\n[workload.filters]\n"
            "constraint = 1\n",
            "[workload.filters] constraint: unknown key",
        ),
        ("[workload.filters]\nconstraints = 1\n", "[workload.filters]: filters are drawn from"),
        (
            '[workload.attributes]\nv = { min = 0.0, max = 9.0, scale = "log" }\n',
            '[workload.attributes] v: scale = "log" needs min > 0',
        ),
        (
            '[workload.attributes]\nv = { min = 1.0, max = 9.0, scale = "exp" }\n',
            "[workload.attributes] v scale: must be 'linear' | 'log'",
        ),
        (
            "[workload.attributes]\ns = { values = 3, integer = true }\n",
            "[workload.attributes] s: scale and integer are for numeric attributes",
        ),
        (
            "[workload.attributes]\nv = { min = 0.2, max = 0.7, integer = true }\n",
            "[workload.attributes] v: integer = true needs an integer in [min, max)",
        ),
        (
            "[workload.attributes]\ns = { values = 3 }\n[workload.filters]\n"
            'patterns = [{ t = "eq" }]\n',
            "[workload.filters] patterns[0] t: not in [workload.attributes] (known: s)",
        ),
        (
            "[workload.attributes]\ns = { values = 3 }\n[workload.filters]\n"
            'patterns = [{ s = "lt" }]\n',
            "[workload.filters] patterns[0] s: must be one of 'eq', 'top', 'own' for a categorical",
        ),
        (
            "[workload.attributes]\np = { min = 0.0, max = 1.0 }\n[workload.filters]\n"
            'patterns = [{ p = "lt" }, { p = "eq" }]\n',
            "[workload.filters] patterns[1] p: must be one of 'lt', 'le', 'gt', 'ge' for a numeric",
        ),
        (
            "[workload.attributes]\ns = { values = 3 }\n[workload.filters]\n"
            'patterns = [{ weight = 0, s = "eq" }]\n',
            "[workload.filters] patterns[0] weight: must be a number > 0, got 0",
        ),
        (
            "[workload.attributes]\ns = { values = 3 }\n[workload.filters]\n"
            "patterns = [{ weight = 1 }]\n",
            "[workload.filters] patterns[0]: names no attribute",
        ),
        (
            "[workload.attributes]\ns = { values = 3 }\n[workload.filters]\nconstraints = 1\n"
            'patterns = [{ s = "eq" }]\n',
            "[workload.filters]: give either patterns or constraints and selectivity",
        ),
        (
            "[workload.attributes]\ns = { values = 3 }\n[workload.filters]\npatterns = []\n",
            "[workload.filters] patterns: must be a non-empty array of tables",
        ),
    ],
)
def test_cli_bad_attribute_and_filter_keys_one_line_exit_2(
    tmp_path: Path, content: str, expect: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE + content)
    result = subprocess.run(
        [sys.executable, "-m", "pubmesh", "sim", str(path), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and expect in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------
# Filter patterns and log-uniform integers (docs/protocols/chord.md §11's workloads W1–W4)
# ------------------------------------------------------------------------------------------
SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_w1_draws_its_three_filter_shapes_in_their_shares() -> None:
    """W1 (1,000 nodes × 3 subscriptions): 50% {symbol}, 30% {symbol, price < X}, 20%
    {exchange, volume ≥ V}, each share within 5 binomial sd; every value in its domain."""
    p = plan(load_scenario(SCENARIOS / "chord_w1.toml"))
    subs = p.subscriptions
    assert len(subs) == 3000 and len({s.topic for s in subs}) == 10
    shapes: dict[tuple[str, ...], int] = {}
    symbols = {categorical_value(i) for i in range(100)}
    for sub in subs:
        assert sub.filter is not None
        shape = tuple(sorted(sub.filter))
        shapes[shape] = shapes.get(shape, 0) + 1
        if "symbol" in sub.filter:
            assert sub.filter["symbol"] in symbols
        if "price" in sub.filter:
            (x,) = sub.filter["price"].values()
            assert set(sub.filter["price"]) == {"lt"} and 0.0 <= x < 1000.0
        if "volume" in sub.filter:
            (v,) = sub.filter["volume"].values()
            assert set(sub.filter["volume"]) == {"ge"} and v == int(v) and 1 <= v < 1e6
            assert sub.filter["exchange"] in {categorical_value(i) for i in range(4)}
    n = len(subs)
    for shape, share in (
        (("symbol",), 0.5),
        (("price", "symbol"), 0.3),
        (("exchange", "volume"), 0.2),
    ):
        assert abs(shapes[shape] - share * n) < 5 * math.sqrt(n * share * (1 - share)), shapes
    assert sum(shapes.values()) == n


def test_log_uniform_integers_spread_over_the_decades() -> None:
    """volume = ⌊10^U(0,6)⌋: integers in [1, 10⁶), and each decade holds a sixth of them
    (within 5 binomial sd)."""
    p = plan(load_scenario(SCENARIOS / "chord_w1.toml", overrides=["workload.publications=3000"]))
    volumes = [pub.attributes["volume"] for pub in p.publications if pub.attributes]
    assert len(volumes) == 3000
    assert all(isinstance(v, float) and v == int(v) and 1 <= v < 1e6 for v in volumes)
    n, share = len(volumes), 1 / 6
    for decade in range(6):
        count = sum(10**decade <= v < 10 ** (decade + 1) for v in volumes)
        assert abs(count - n * share) < 5 * math.sqrt(n * share * (1 - share)), (decade, count)


def test_own_and_top_values() -> None:
    """W3: each node's own symbol (rank = node id); W4: everyone the most popular one."""
    w3 = plan(load_scenario(SCENARIOS / "chord_w3.toml", overrides=["run.nodes=50"]))
    assert sorted((s.node, s.filter) for s in w3.subscriptions) == [
        (i, {"symbol": categorical_value(i)}) for i in range(50)
    ]
    w4 = plan(load_scenario(SCENARIOS / "chord_w4.toml"))
    assert len(w4.subscriptions) == 200
    assert all(s.filter == {"symbol": categorical_value(0)} for s in w4.subscriptions)
    w2 = plan(load_scenario(SCENARIOS / "chord_w2.toml", overrides=["run.nodes=50"]))
    assert all(set(s.filter or ()) == {"price"} for s in w2.subscriptions)
    assert len({s.filter["price"]["lt"] for s in w2.subscriptions if s.filter}) == 50


# ------------------------------------------------------------------------------ fault roles
ROLE_SCENARIO = """
[run]
stack = "brokertree"
nodes = 40
seed = 3
[workload]
topics = 2
subscriptions_per_node = 1
[[faults]]
at = 5.0
kind = "crash"
fraction = 0.5
role = "broker"
[stack.brokertree]
brokers = 10
"""


def test_a_fault_fraction_with_a_role_picks_among_the_nodes_of_that_role() -> None:
    """[[faults]] role = "broker": the fraction is of the live brokers (infrastructure), which
    a plain fraction never touches; the same plan for the same seed."""
    plan_ = plan(parse_scenario(ROLE_SCENARIO))
    (fault,) = plan_.faults
    assert len(fault.nodes) == 5 and all(v < 10 for v in fault.nodes), fault
    assert plan(parse_scenario(ROLE_SCENARIO)).faults == plan_.faults
    plain = plan(parse_scenario(ROLE_SCENARIO.replace('role = "broker"\n', "")))
    assert len(plain.faults[0].nodes) == 15 and all(v >= 10 for v in plain.faults[0].nodes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('role = "broker"', 'unknown role "supervisor"'),
        ("fraction = 0.5", "only a crash or leave fraction picks by role"),
    ],
)
def test_a_fault_role_is_checked(change: str, message: str) -> None:
    text = ROLE_SCENARIO
    if change.startswith("role"):
        text = text.replace(change, 'role = "supervisor"')
    else:
        text = text.replace(change, "nodes = [1, 2]")
    with pytest.raises(ScenarioError, match=message.replace('"', "'")):
        parse_scenario(text)


def test_the_planners_id_sets_read_as_the_sorted_lists_they_replace() -> None:
    """The planner's members and subscribers per topic (workload._SortedIds) append on
    addition and sort on read; after any mix of additions, removals, re-additions and reads
    a read equals the sorted list of the ids present, which the bisected insertions kept.
    Seed 7 replays: `pytest tests/sim/test_workload.py -k sorted_lists`."""
    import random

    from pubmesh.scenario.workload import _SortedIds

    rng = random.Random(7)
    ids = _SortedIds()
    present: set[int] = set()
    reads = 0
    for _ in range(20_000):
        node = rng.randrange(300)
        roll = rng.random()
        if roll < 0.45:
            ids.add(node)
            present.add(node)
        elif roll < 0.8:
            ids.discard(node)
            present.discard(node)
        else:
            reads += 1
            assert ids.ordered() == sorted(present), f"after {reads} reads"
        assert len(ids) == len(present) and (node in ids) == (node in present)
    assert reads > 3_000 and ids.ordered() == sorted(present)
