"""Scenario files: what to simulate, in TOML, validated down to the last key.

A scenario is one TOML document with the sections below. Every key has a default except
``run.stack``; unknown keys, wrong types and impossible values are refused with one line that
names the file, the key and what would be accepted (:class:`pubmesh.errors.ScenarioError`).

``[run]``
    ``stack`` (gossip | skipring | chord | brokertree | clique | d2g), ``nodes`` (≥ 1, counting
    the stack's infrastructure nodes such as the skipring supervisor), ``seed``, ``duration``
    (simulated seconds; also the end of the observation window), ``start_spread`` (node start
    times are drawn uniformly from [0, start_spread]; infrastructure nodes start at 0),
    ``name`` (defaults to the file's stem).
``[network]``
    ``latency``: ``{dist = "constant", value}``, ``{dist = "uniform", min, max}`` or
    ``{dist = "lognormal", median, sigma}`` (seconds, drawn per message, so delivery is non-FIFO
    unless the distribution is constant); ``loss`` (probability a message is lost);
    ``detection_delay`` (seconds until the failure detector reports a crashed peer or a failed
    send); ``timer_jitter`` (every timer's delay is multiplied by 1 + U(−j, j));
    ``partition_notices`` (a send across a partition is reported as a failed send, like a TCP
    timeout).
``[workload]``
    ``topics`` (named t0, t1, ...), ``topic_popularity`` ("uniform" or "zipf" with exponent
    ``zipf_s``), ``subscriptions_per_node`` (distinct topics each workload node subscribes to,
    drawn by popularity), ``subscribe_at`` (seconds after a node starts), ``publications``
    (total, whole system), ``publish_start``, ``publish_rate`` (per second, whole system; evenly
    spaced), ``publisher`` ("subscriber": a live subscriber of the topic; "any": any live
    node), ``payload_size`` (bytes), ``unsubscribe_fraction`` and ``unsubscribe_at`` (that share
    of workload nodes drops one of its subscriptions at that time), ``late_fraction`` and
    ``late_at`` (that share of workload nodes, drawn from a stream of its own, makes its first
    subscriptions at run time ``late_at`` instead, asking for ``history``: "all", a count such
    as "50" or a duration such as "90s"; "" asks for none), on stacks that keep history.
``[workload.attributes]`` (content-based workloads; one entry per attribute, every
    publication carries a value of each)
    ``name = { values = k, zipf = s }``: categorical, the strings s0 .. s<k-1> with Zipf
    popularity of exponent s (0, the default, is uniform); ``name = { min = a, max = b }``:
    numeric, uniform in [a, b); add ``scale = "log"`` for log-uniform (min > 0) and
    ``integer = true`` to round down. E.g. ``symbol = { values = 20, zipf = 1.0 }``,
    ``price = { min = 0.0, max = 100.0 }``,
    ``volume = { min = 1, max = 1e6, scale = "log", integer = true }``.
``[workload.filters]`` (subscriptions of content-based stacks; needs attributes)
    ``constraints`` (per filter, on distinct attributes drawn from the schema; default 1)
    and ``selectivity`` (in (0, 1]: the share of publications one filter should match;
    default 0.1). Or, instead, ``patterns``: an array of filter shapes, each drawn with
    probability proportional to its ``weight``, naming a constraint kind per attribute:
    ``"eq"`` (one value, drawn by popularity), ``"top"`` (the most popular value) or
    ``"own"`` (value ``node mod values``) for a categorical attribute; ``"lt"``, ``"le"``,
    ``"gt"``, ``"ge"`` (a threshold drawn like the attribute's values) for a numeric one.
    E.g. ``patterns = [{ weight = 0.5, symbol = "eq" }, { weight = 0.5, symbol = "eq",
    price = "lt" }]`` (scenarios/chord_w1.toml). Stacks that are not content-based subscribe
    to topics and ignore this.
``[init]``
    ``corruption`` ("none" or one of the stack's corruption kinds) and ``junk_messages``
    (messages put in flight by the corruption hook), applied once every node has started.
    ``overlay``: ``"joined"`` (default: nodes start at their planned times and build the
    overlay by the protocol's own joins) or ``"warm"``: every initial node is up and
    subscribed to its workload topics at t = 0 in an overlay the stack builds by
    construction in a legitimate state (the stack's ``warm_start`` hook, e.g. gossip's
    symmetric active views and full passive views), and the protocols run from there as
    usual. For runs about what happens *on* an overlay (a broadcast over 10^6 nodes) rather
    than about building it.
``[[faults]]`` (any number, each a table)
    ``at`` (seconds) and ``kind``: ``crash`` / ``leave`` (``fraction`` of live workload nodes other
    than the stack's contact nodes, which run the experiment as in Henriques & Pamplona §3.1, or
    ``nodes = [ids]``, which may name any node; a leave runs the stack's leave protocol; with ``role
    = "broker"`` (any role of the stack, "peer" for workload nodes) the fraction is of the live
    nodes of that role, infrastructure included), ``recover`` (``fraction`` of crashed nodes or
    ``nodes``; they restart with fresh state and resubscribe; with ``durable = true`` they come
    back with what ``pubmesh node --data-dir`` keeps: the ids they delivered in the last 10
    minutes, none of which is delivered again). Named nodes that the fault cannot act
    on at that time (not started, already down, already left) are skipped, and the trace lists the
    nodes it did act on. ``partition`` (``fraction`` of live nodes split off, or ``parts = k``
    random sets, or ``groups = [[ids], ...]``), ``heal``, ``churn`` (``rate`` events per second
    until ``until``; each event is a join of a new node with probability ``join_fraction``, else a
    crash, or a graceful leave if ``graceful = true``).
``[trace]``
    ``messages`` ("full": one row per message; "counts": per-node per-second counters for very
    large runs), ``snapshot_interval`` (seconds between overlay snapshots; 0 = none).
``[stack.<name>]``
    The stack's own parameters (its params dataclass; e.g. ``[stack.gossip] fanout = 4``).

Overrides given as ``section.key=value`` (``--set`` on the command line) are applied before
validation; a value is read as TOML, so ``--set run.nodes=64 --set network.loss=0.1`` work, and
a bare word is taken as a string. ``faults.0.fraction=0.8`` reaches into the first fault:
``faults.N`` counts the ``[[faults]]`` tables from 0, so errors call ``faults.0`` ``[[faults]] #1``.
An override's mistake is named by the override (``--set #2 'run.nodes=0': ...``), not the file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pubmesh import typed
from pubmesh.errors import ScenarioError, did_you_mean
from pubmesh.proto.content.filters import topic_based
from pubmesh.proto.history import parse_history
from pubmesh.stacks.base import StackSpec, all_stack_names, get_stack


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Latency:
    dist: Literal["constant", "uniform", "lognormal"] = "uniform"
    value: float = 0.01
    min: float = 0.005
    max: float = 0.05
    median: float = 0.02
    sigma: float = 0.5

    def check(self) -> str | None:
        if self.dist == "constant" and self.value < 0:
            return "value must be ≥ 0"
        if self.dist == "uniform" and not 0 <= self.min <= self.max:
            return f"need 0 ≤ min ≤ max, got min={self.min} max={self.max}"
        if self.dist == "lognormal" and (self.median <= 0 or self.sigma < 0):
            return "need median > 0 and sigma ≥ 0"
        return None


@dataclass(frozen=True)
class RunSection:
    stack: str = ""
    nodes: int = 100
    seed: int = 1
    duration: float = 60.0
    start_spread: float = 5.0
    name: str = ""


@dataclass(frozen=True)
class NetworkSection:
    latency: Latency = field(default_factory=Latency)
    loss: float = 0.0
    detection_delay: float = 1.0
    timer_jitter: float = 0.0
    partition_notices: bool = True


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute of ``[workload.attributes]``: categorical (``values``, ``zipf``) or
    numeric (``min``, ``max``; ``scale = "log"`` draws log-uniformly, ``integer = true`` rounds
    down, e.g. docs/protocols/chord.md §11's W1 volume ⌊10^U(0,6)⌋ is ``{ min = 1, max = 1e6,
    scale = "log", integer = true }``)."""

    values: int | None = None
    zipf: float | None = None
    min: float | None = None
    max: float | None = None
    scale: Literal["linear", "log"] = "linear"
    integer: bool = False

    def check(self) -> str | None:
        numeric = self.min is not None or self.max is not None
        if self.values is not None and numeric:
            return "give either values (categorical) or min and max (numeric), not both"
        if self.values is not None:
            if self.values < 1:
                return f"values must be ≥ 1, got {self.values}"
            if self.zipf is not None and self.zipf < 0:
                return f"zipf must be ≥ 0, got {self.zipf}"
            if self.scale != "linear" or self.integer:
                return "scale and integer are for numeric attributes (min and max)"
            return None
        if self.zipf is not None:
            return "zipf needs values (a categorical attribute)"
        if self.min is None or self.max is None:
            return "needs values = k (categorical) or min and max (numeric)"
        if not self.min < self.max:
            return f"need min < max, got min={self.min} max={self.max}"
        if self.scale == "log" and self.min <= 0:
            return f'scale = "log" needs min > 0, got min={self.min}'
        if self.integer and math.floor(self.max) <= math.ceil(self.min) - 1:
            return f"integer = true needs an integer in [min, max), got [{self.min}, {self.max})"
        return None


#: Constraint kinds of a filter pattern, by attribute kind (see :class:`FilterPattern`).
CATEGORICAL_OPS = ("eq", "top", "own")
NUMERIC_OPS = ("lt", "le", "gt", "ge")


@dataclass(frozen=True)
class FilterPattern:
    """One entry of ``[[workload.filters.patterns]]``: a filter shape drawn with probability
    ``weight`` ÷ (sum of weights), one constraint per named attribute (docs/protocols/chord.md §11's
    workloads). For a categorical attribute ``"eq"`` is one value drawn by the attribute's own
    popularity, ``"top"`` the most popular value (every subscriber alike, W4), ``"own"`` the
    value of rank ``node mod values`` (a value per node, W3); for a numeric attribute
    ``"lt"``/``"le"``/``"gt"``/``"ge"`` compare with a threshold drawn from the attribute's own
    distribution (so ``price < X`` with X ~ U[0, 1000) for W1)."""

    weight: float = 1.0
    #: (attribute, kind) in attribute-name order
    constraints: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FilterSpec:
    """``[workload.filters]``: how content-based subscriptions draw their filters: either
    ``constraints`` attributes aiming at ``selectivity`` (the default), or ``patterns``."""

    constraints: int = 1
    selectivity: float = 0.1
    #: [[workload.filters.patterns]] (parsed by _build_workload)
    patterns: tuple[FilterPattern, ...] = ()

    def check(self) -> str | None:
        if self.constraints < 1:
            return f"constraints must be ≥ 1, got {self.constraints}"
        if not 0 < self.selectivity <= 1:
            return f"selectivity must be in (0, 1], got {self.selectivity}"
        return None


@dataclass(frozen=True)
class WorkloadSection:
    topics: int = 1
    topic_popularity: Literal["uniform", "zipf"] = "uniform"
    zipf_s: float = 1.0
    subscriptions_per_node: int = 1
    subscribe_at: float = 0.0
    publications: int = 0
    publish_start: float = 10.0
    publish_rate: float = 10.0
    publisher: Literal["subscriber", "any"] = "subscriber"
    payload_size: int = 100
    unsubscribe_fraction: float = 0.0
    unsubscribe_at: float = 0.0
    late_fraction: float = 0.0
    late_at: float = 0.0
    history: str = "all"
    #: [workload.attributes], by name in name order (parsed by _build_workload)
    attributes: dict[str, AttributeSpec] = field(default_factory=dict)
    #: [workload.filters] (parsed by _build_workload)
    filters: FilterSpec = field(default_factory=FilterSpec)


@dataclass(frozen=True)
class InitSection:
    corruption: str = "none"
    junk_messages: int = 0
    overlay: Literal["joined", "warm"] = "joined"


@dataclass(frozen=True)
class Fault:
    at: float = 0.0
    kind: Literal["crash", "recover", "leave", "partition", "heal", "churn"] = "crash"
    fraction: float | None = None
    nodes: list[int] = field(default_factory=list)
    parts: int = 0
    groups: list[list[int]] = field(default_factory=list)
    rate: float = 0.0
    until: float | None = None
    join_fraction: float = 0.5
    graceful: bool = False
    #: with a fraction, pick among the live nodes of this role ("peer": the workload nodes,
    #: or an infrastructure role of the stack, such as brokertree's "broker") instead of the
    #: workload nodes other than the contacts
    role: str = ""
    #: with recover: the node comes back with what its data directory would hold
    #: (pubmesh.durable: the ids it delivered in the last DELIVERED_SECONDS, never delivered
    #: again), not fresh
    durable: bool = False


@dataclass(frozen=True)
class TraceSection:
    messages: Literal["full", "counts"] = "full"
    snapshot_interval: float = 0.0


@dataclass(frozen=True)
class Scenario:
    run: RunSection
    network: NetworkSection
    workload: WorkloadSection
    init: InitSection
    faults: tuple[Fault, ...]
    trace: TraceSection
    stack_params: Any
    source: str = "<string>"
    #: The effective scenario (file plus overrides) as canonical TOML: stored in the trace so a
    #: run can be replayed from its trace alone.
    text: str = ""

    @property
    def name(self) -> str:
        return self.run.name

    def with_overrides(self, overrides: list[str]) -> Scenario:
        return parse_scenario(self.text, source=self.source, overrides=overrides)


SECTIONS: dict[str, type] = {
    "run": RunSection,
    "network": NetworkSection,
    "workload": WorkloadSection,
    "init": InitSection,
    "trace": TraceSection,
}


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------
def load_scenario(
    path: str | Path, overrides: list[str] | None = None, labels: list[str] | None = None
) -> Scenario:
    """The scenario file at ``path`` with ``overrides`` (``section.key=value``) applied; see
    :func:`parse_scenario` for ``labels``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"{path}: cannot read scenario file ({error})") from None
    return parse_scenario(
        text,
        source=str(path),
        overrides=overrides or [],
        default_name=path.stem,
        labels=labels,
    )


def parse_scenario(
    text: str,
    *,
    source: str = "<string>",
    overrides: list[str] | None = None,
    default_name: str = "scenario",
    labels: list[str] | None = None,
) -> Scenario:
    """The scenario in ``text`` with ``overrides`` applied. ``labels``, one per override, are
    how the user gave them (``--set #1 'run.nodes=0'``): a mistake in an override, or a value
    an override set that validation refuses, is then named by its label rather than blamed on
    ``source``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{source}: not valid TOML: {error}") from None
    overrides = overrides or []
    if labels is not None and len(labels) != len(overrides):
        raise ValueError("parse_scenario: one label per override")
    for index, override in enumerate(overrides):
        apply_override(data, override, source, labels[index] if labels else None)
    try:
        return _validated(data, source, default_name)
    except ScenarioError as error:
        if labels:
            raise _blamed(error, source, overrides, labels) from None
        raise


def _blamed(
    error: ScenarioError, source: str, overrides: list[str], labels: list[str]
) -> ScenarioError:
    """``error`` named by the last override that set the key it names (``[run] nodes`` for
    ``run.nodes=0``), else as it was."""
    text = str(error)
    rest = text.removeprefix(f"{source}: ")
    for override, label in reversed(list(zip(overrides, labels, strict=True))):
        for shown in _shown_keys(override.partition("=")[0].strip().split(".")):
            if rest.startswith(shown) and rest[len(shown) : len(shown) + 1] in (" ", ":"):
                return ScenarioError(f"{label}: {rest}")
    return error


def _shown_keys(parts: list[str]) -> list[str]:
    """How the scenario's errors write the key an override's path names, longest first:
    ``faults.0.at`` is ``[[faults]] #1 at``, ``network.latency.min`` ``[network] latency``."""
    if parts[0] == "faults" and len(parts) > 1 and parts[1].isdigit():
        at = f"[[faults]] #{int(parts[1]) + 1}"
        return [f"{at} {parts[2]}", at] if len(parts) > 2 else [at]
    return [f"[{'.'.join(parts[:j])}] {parts[j]}" for j in range(len(parts) - 1, 0, -1)]


def _validated(data: dict[str, Any], source: str, default_name: str) -> Scenario:
    where = source
    unknown = sorted(set(data) - {*SECTIONS, "faults", "stack"})
    if unknown:
        raise ScenarioError(
            f"{where}: unknown section [{unknown[0]}]"
            f"{did_you_mean(unknown[0], [*SECTIONS, 'faults', 'stack'])} (sections: run, "
            "network, workload, init, faults, trace, stack.<name>)"
        )
    _check_content_tables(data, where)
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise ScenarioError(f"{where}: [{name}] must be a table")
        if name == "workload":
            sections[name] = _build_workload(table, where)
        else:
            sections[name] = _build(cls, table, f"{where}: [{name}]")

    run: RunSection = sections["run"]
    stacks = all_stack_names()
    if not run.stack:
        raise ScenarioError(f"{where}: [run] stack is required (one of {', '.join(stacks)})")
    if run.stack not in stacks:
        raise ScenarioError(
            f"{where}: [run] stack: unknown stack {run.stack!r}{did_you_mean(run.stack, stacks)}"
            f" (one of {', '.join(stacks)})"
        )
    try:
        spec = get_stack(run.stack)
    except KeyError as error:
        raise ScenarioError(f"{where}: [run] stack: {error.args[0]}") from None
    if not run.name:
        run = dataclasses.replace(run, name=default_name)
        sections["run"] = run

    faults_raw = data.get("faults", [])
    if not isinstance(faults_raw, list) or not all(isinstance(f, dict) for f in faults_raw):
        raise ScenarioError(f"{where}: faults must be an array of tables ([[faults]])")
    faults = tuple(
        _build(Fault, f, f"{where}: [[faults]] #{i + 1}") for i, f in enumerate(faults_raw)
    )

    stack_tables = data.get("stack", {})
    if not isinstance(stack_tables, dict):
        raise ScenarioError(f"{where}: [stack] must hold tables like [stack.{run.stack}]")
    for other in stack_tables:
        if other not in stacks:
            raise ScenarioError(
                f"{where}: unknown section [stack.{other}]{did_you_mean(other, stacks)}"
            )
    own = stack_tables.get(run.stack, {})
    if not isinstance(own, dict):
        raise ScenarioError(f"{where}: [stack.{run.stack}] must be a table")
    stack_params = load_stack_params(spec, own, f"{where}: [stack.{run.stack}]")

    scenario = Scenario(
        run=run,
        network=sections["network"],
        workload=sections["workload"],
        init=sections["init"],
        faults=faults,
        trace=sections["trace"],
        stack_params=stack_params,
        source=source,
    )
    _check_values(scenario, spec.corruption_kinds, spec.infrastructure(run.nodes, stack_params))
    if scenario.init.overlay == "warm" and spec.warm_start is None:
        raise ScenarioError(
            f'{source}: [init] overlay: stack {run.stack} has no warm start (use "joined")'
        )
    canonical = {**{k: v for k, v in data.items() if k != "stack"}}
    canonical["run"] = {**data.get("run", {}), "name": run.name}
    if own:
        canonical["stack"] = {run.stack: own}
    return dataclasses.replace(scenario, text=dump_toml(canonical))


def _override_problem(parts: list[str], data: dict[str, Any]) -> str | None:
    """What is wrong with the key path of an override (``stack.gossip.activ_view``), in the
    user's words and with the close name, before it is applied; None if nothing (its value is
    validated with the rest of the scenario)."""
    section = parts[0]
    if section == "faults":
        faults = data.get("faults", [])
        if not isinstance(faults, list):
            return None  # validation names it
        if len(parts) != 3 or not parts[1].isdigit():
            return (
                "write faults.N.FIELD=VALUE, N counting the [[faults]] tables from 0 "
                "(faults.0 is [[faults]] #1), e.g. faults.0.at=10"
            )
        index, count = int(parts[1]), len(faults)
        if index >= count:
            have = {0: "no [[faults]] table", 1: "one [[faults]] table, faults.0"}.get(
                count, f"{count} [[faults]] tables, faults.0 to faults.{count - 1}"
            )
            return f"no faults.{index} ([[faults]] #{index + 1}): the scenario has {have}"
        names = [f.name for f in dataclasses.fields(Fault)]
        if parts[2] not in names:
            return (
                f"no field {parts[2]} in a [[faults]] table{did_you_mean(parts[2], names)} "
                f"(fields: {', '.join(names)})"
            )
        return None
    if section == "stack":
        stacks = all_stack_names()
        if parts[1] not in stacks:
            return (
                f"no stack {parts[1]}{did_you_mean(parts[1], stacks)} (stacks: {', '.join(stacks)})"
            )
        if len(parts) < 3:
            return None
        try:
            params = get_stack(parts[1]).params_type
        except KeyError as error:
            return str(error.args[0])
        names = [f.name for f in dataclasses.fields(params)]
        if parts[2] not in names:
            return (
                f"no parameter {parts[2]} for stack {parts[1]}{did_you_mean(parts[2], names)}"
                f" (pubmesh stacks {parts[1]} lists them)"
            )
        return None
    if section not in SECTIONS:
        known = [*SECTIONS, "faults", "stack"]
        return (
            f"no section [{section}]{did_you_mean(section, known)} "
            "(sections: run, network, workload, init, faults, trace, stack.NAME)"
        )
    names = [f.name for f in dataclasses.fields(SECTIONS[section])]
    if parts[1] not in names:
        return (
            f"no key {parts[1]} in [{section}]{did_you_mean(parts[1], names)} "
            f"(keys: {', '.join(names)})"
        )
    return None


#: fault kinds whose effect on deliveries needs publications after them (a heal or a
#: recovery restores what an earlier fault took; it is not itself the experiment)
DISRUPTIVE = ("crash", "leave", "partition", "churn")


def timing_warnings(scenario: Scenario) -> list[str]:
    """One line per part of the scenario that its timing makes meaningless: publishing that
    starts at or after the run's end, and a fault after the last publication (it changes no
    delivery: the run then reports every publication delivered, whatever the fault did;
    not for a stack with a legitimacy predicate, whose convergence measures a late fault).
    ``pubmesh sim``, ``cluster`` and ``sweep`` print them; the run still goes as written."""
    workload, run = scenario.workload, scenario.run
    where = scenario.source
    if workload.publications <= 0:
        return []
    if workload.publish_start >= run.duration:
        return [
            f"{where}: [workload] publish_start = {workload.publish_start:g} s is at or past "
            f"the run's end ([run] duration = {run.duration:g} s): no publication is made"
        ]
    if get_stack(run.stack).is_legitimate is not None:
        return []  # a late fault is measured by the overlay's convergence (convergence_time)
    last = workload.publish_start + (workload.publications - 1) / workload.publish_rate
    lines = []
    for number, fault in enumerate(scenario.faults, 1):
        if fault.kind in DISRUPTIVE and fault.at > last:
            lines.append(
                f"{where}: [[faults]] #{number} ({fault.kind} at {fault.at:g} s) comes after "
                f"the last publication ({last:.2f} s): it changes no delivery; publish for "
                "longer (workload.publications, publish_rate) or fault earlier"
            )
    return lines


def inert_parameters(scenario: Scenario) -> dict[str, str]:
    """Override keys (``section.key``) whose value this scenario never reads, each with the
    reason: the workload's and the stack's (a stack's params class may say which of its own
    are unused, through an ``inert()`` method). ``pubmesh sweep`` uses it to explain a grid
    parameter that changes nothing."""
    found: dict[str, str] = {}
    workload = scenario.workload
    if workload.publications == 0:
        for name in ("publish_start", "publish_rate", "publisher", "payload_size"):
            found[f"workload.{name}"] = f"workload.publications = 0, so {name} is unused"
    if workload.topic_popularity != "zipf":
        found["workload.zipf_s"] = "topic_popularity is not zipf, so zipf_s is unused"
    if workload.unsubscribe_fraction == 0:
        found["workload.unsubscribe_at"] = "unsubscribe_fraction = 0, so unsubscribe_at is unused"
    inert = getattr(scenario.stack_params, "inert", None)
    if callable(inert):
        for name, why in inert().items():
            found[f"stack.{scenario.run.stack}.{name}"] = why
    return found


def effective_signature(scenario: Scenario, leave_out: Iterable[str] = ()) -> str:
    """The scenario as it runs, as canonical JSON: every section with its defaults filled in,
    without the seed and the name, and without the ``leave_out`` keys (``section.key``, e.g.
    the :func:`inert_parameters`). Two grid points with equal signatures simulate the same
    thing."""
    data: dict[str, Any] = {
        "run": dataclasses.asdict(scenario.run),
        "network": dataclasses.asdict(scenario.network),
        "workload": dataclasses.asdict(scenario.workload),
        "init": dataclasses.asdict(scenario.init),
        "trace": dataclasses.asdict(scenario.trace),
        "faults": [dataclasses.asdict(f) for f in scenario.faults],
        "stack": {scenario.run.stack: dataclasses.asdict(scenario.stack_params)},
    }
    del data["run"]["seed"], data["run"]["name"]
    for key in leave_out:
        table: Any = data
        *path, last = key.split(".")
        for part in path:
            table = table.get(part) if isinstance(table, dict) else None
        if isinstance(table, dict):
            table.pop(last, None)
    return json.dumps(data, sort_keys=True, default=repr)


def apply_override(
    data: dict[str, Any], override: str, source: str, label: str | None = None
) -> None:
    """``override`` (``section.key=value``) applied to the scenario's ``data``. Its mistakes
    (no such section, key, stack, parameter or fault; not ``section.key=value``) are named by
    ``label``, how the user gave it (``--set #1 'run.nodez=3'``), else by ``source`` and the
    override."""
    said = label or f"{source}: override {override!r}"
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key or "." not in key:
        raise ScenarioError(f"{said}: write section.key=value, e.g. run.nodes=64")
    value = setting_value(raw)
    parts = key.split(".")
    problem = _override_problem(parts, data)
    if problem:
        raise ScenarioError(f"{said}: {problem}")
    target: Any = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(target, list):
            if not part.isdigit() or int(part) >= len(target):
                raise ScenarioError(f"{said}: no item {part} in {parts[i - 1]}")
            target = target[int(part)]
        else:
            target = target.setdefault(part, {})
        if not isinstance(target, dict | list):
            raise ScenarioError(f"{said}: {'.'.join(parts[: i + 1])} is not a table")
    if isinstance(target, list):
        raise ScenarioError(f"{said}: name a field of an item, e.g. faults.0.at")
    target[parts[-1]] = value


# --------------------------------------------------------------------------------------------
# Generic validation of a TOML table against a dataclass
# --------------------------------------------------------------------------------------------
def load_stack_params(spec: StackSpec, table: Mapping[str, Any], where: str) -> Any:
    """The one typed loader of a stack's parameters, for a scenario's ``[stack.<name>]``, the
    CLI's ``--set KEY=VALUE`` (:func:`setting_value`) and the API's ``params=`` alike:
    ``table`` (parameter name -> value) read into the stack's params dataclass, an unknown name
    refused with the names it may have meant, each value converted to its field's declared type
    (:mod:`pubmesh.typed`), then the dataclass's own ``check()``. ScenarioError (a UserError)
    names ``where`` and the parameter."""
    return _build(spec.params_type, dict(table), where)


def setting_value(raw: str) -> Any:
    """The value of a ``KEY=VALUE`` setting as an override reads it: a TOML value (``3``,
    ``0.5``, ``true``, ``"x"``, ``[1, 2]``), else the text itself."""
    try:
        return tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return raw.strip()


def _build(cls: type, table: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(table) - set(names))
    if unknown:
        raise ScenarioError(
            f"{where} {unknown[0]}: unknown key{did_you_mean(unknown[0], names)} "
            f"(known: {', '.join(names)})"
        )
    values: dict[str, Any] = {}
    for name in names:
        if name in table:
            values[name] = typed.convert(table[name], hints[name], f"{where} {name}", _TOML)
    try:
        obj = cls(**values)
    except (ValueError, TypeError) as error:
        raise ScenarioError(f"{where}: {error}") from None
    check = getattr(obj, "check", None)
    if callable(check):
        problem = check()
        if problem:
            raise ScenarioError(f"{where}: {problem}")
    return obj


def _check_content_tables(data: dict[str, Any], where: str) -> None:
    """[workload.attributes] and [workload.filters] on a topic-based stack: refused in the
    words the API and the shell use (the stack would ignore them)."""
    run, workload = data.get("run"), data.get("workload")
    if not isinstance(run, dict) or not isinstance(workload, dict):
        return
    stack = run.get("stack")
    if not isinstance(stack, str) or stack not in all_stack_names():
        return  # the [run] section's own check names the problem
    try:
        content_based = get_stack(stack).content_based
    except KeyError:
        return
    for table in ("attributes", "filters"):
        if table in workload and not content_based:
            raise ScenarioError(f"{where}: [workload.{table}]: {topic_based(stack, table)}")


def _build_workload(table: dict[str, Any], where: str) -> WorkloadSection:
    """[workload] with its sub-tables [workload.attributes] and [workload.filters], each
    error naming the sub-table and key."""
    plain = {k: v for k, v in table.items() if k not in ("attributes", "filters")}
    section: WorkloadSection = _build(WorkloadSection, plain, f"{where}: [workload]")
    attributes_raw = table.get("attributes", {})
    if not isinstance(attributes_raw, dict):
        raise ScenarioError(
            f"{where}: [workload.attributes] must be a table, e.g. price = {{ min = 0.0, "
            f"max = 100.0 }}, got {attributes_raw!r}"
        )
    attributes: dict[str, AttributeSpec] = {}
    for name in sorted(attributes_raw):
        spec = attributes_raw[name]
        key = f"{where}: [workload.attributes] {name}"
        if not isinstance(spec, dict):
            raise ScenarioError(
                f"{key}: must be a table: {{ values = k, zipf = s }} or {{ min = a, max = b }}, "
                f"got {spec!r}"
            )
        attributes[name] = _build(AttributeSpec, spec, key)
    filters = FilterSpec()
    if "filters" in table:
        filters_raw = table["filters"]
        if not isinstance(filters_raw, dict):
            raise ScenarioError(f"{where}: [workload.filters] must be a table, got {filters_raw!r}")
        plain_filters = {k: v for k, v in filters_raw.items() if k != "patterns"}
        filters = _build(FilterSpec, plain_filters, f"{where}: [workload.filters]")
        if not attributes:
            raise ScenarioError(
                f"{where}: [workload.filters]: filters are drawn from [workload.attributes], "
                "which is empty"
            )
        if filters.constraints > len(attributes):
            raise ScenarioError(
                f"{where}: [workload.filters] constraints: must be at most the number of "
                f"attributes ({len(attributes)}), got {filters.constraints}"
            )
        if "patterns" in filters_raw:
            if plain_filters:
                raise ScenarioError(
                    f"{where}: [workload.filters]: give either patterns or constraints and "
                    f"selectivity, not both (got {', '.join(sorted(filters_raw))})"
                )
            patterns = _build_patterns(filters_raw["patterns"], attributes, where)
            filters = dataclasses.replace(filters, patterns=patterns)
    return dataclasses.replace(section, attributes=attributes, filters=filters)


def _build_patterns(
    raw: Any, attributes: Mapping[str, AttributeSpec], where: str
) -> tuple[FilterPattern, ...]:
    """[[workload.filters.patterns]]: each a table ``{ weight = w, <attribute> = "<kind>" }``."""
    key = f"{where}: [workload.filters] patterns"
    example = '[{ weight = 0.5, symbol = "eq" }, { weight = 0.5, price = "lt" }]'
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(f"{key}: must be a non-empty array of tables, e.g. {example}")
    patterns = []
    for index, table in enumerate(raw):
        at = f"{key}[{index}]"
        if not isinstance(table, dict):
            raise ScenarioError(f"{at}: must be a table, e.g. {example}, got {table!r}")
        weight = table.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ScenarioError(f"{at} weight: must be a number > 0, got {weight!r}")
        constraints = []
        for name in sorted(k for k in table if k != "weight"):
            kind = table[name]
            if name not in attributes:
                raise ScenarioError(
                    f"{at} {name}: not in [workload.attributes] "
                    f"(known: {', '.join(sorted(attributes))})"
                )
            ops = CATEGORICAL_OPS if attributes[name].values is not None else NUMERIC_OPS
            if kind not in ops:
                what = "categorical" if ops is CATEGORICAL_OPS else "numeric"
                raise ScenarioError(
                    f"{at} {name}: must be one of {', '.join(map(repr, ops))} for a {what} "
                    f"attribute, got {kind!r}"
                )
            constraints.append((name, kind))
        if not constraints:
            raise ScenarioError(f"{at}: names no attribute, e.g. {example}")
        patterns.append(FilterPattern(float(weight), tuple(constraints)))
    return tuple(patterns)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin is list:
        return f"array of {_type_name(get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


_KINDS: dict[Any, str] = {**typed.KINDS, str: "a string"}


def _wanted(tp: Any) -> str:
    """How a scenario's error names what a key wants."""
    origin = get_origin(tp)
    if tp in _KINDS:
        return _KINDS[tp]
    if origin is list:
        return f"an {_type_name(tp)}"
    if origin is tuple:
        return "an array"
    return _type_name(tp)


def _table(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise ScenarioError(f'{where}: must be a table, e.g. {{ dist = "uniform", ... }}')
    return _build(cls, value, where)


#: the shared type-driven reader (pubmesh.typed) in a scenario's words: TOML's inf and nan
#: refused, a union read as its one non-None arm, a table for a nested dataclass
_TOML = typed.Dialect(
    error=ScenarioError,
    wrong=lambda where, wanted, value: f"{where}: must be {wanted}, got {value!r}",
    describe=_wanted,
    finite=True,
    table=_table,
)


def _check_values(
    s: Scenario, corruption_kinds: tuple[str, ...], infrastructure: dict[int, str] | Any
) -> None:
    where = s.source
    problems: list[tuple[str, str]] = []

    def need(condition: bool, key: str, message: str) -> None:
        if not condition:
            problems.append((key, message))

    r, n, w = s.run, s.network, s.workload
    need(r.nodes >= 1, "[run] nodes", f"must be ≥ 1, got {r.nodes}")
    need(
        len(infrastructure) < r.nodes,
        "[run] nodes",
        f"must exceed the stack's {len(infrastructure)} infrastructure node(s)",
    )
    need(r.nodes <= 50_000_000, "[run] nodes", f"must be ≤ 50,000,000, got {r.nodes}")
    need(r.duration > 0, "[run] duration", f"must be > 0, got {r.duration}")
    need(r.start_spread >= 0, "[run] start_spread", f"must be ≥ 0, got {r.start_spread}")
    need(r.seed >= 0, "[run] seed", f"must be ≥ 0, got {r.seed}")
    need(0 <= n.loss < 1, "[network] loss", f"must be in [0, 1), got {n.loss}")
    need(n.detection_delay >= 0, "[network] detection_delay", "must be ≥ 0")
    need(0 <= n.timer_jitter < 1, "[network] timer_jitter", "must be in [0, 1)")
    need(w.topics >= 1, "[workload] topics", f"must be ≥ 1, got {w.topics}")
    need(w.zipf_s >= 0, "[workload] zipf_s", "must be ≥ 0")
    need(
        0 <= w.subscriptions_per_node <= w.topics,
        "[workload] subscriptions_per_node",
        f"must be between 0 and topics ({w.topics}), got {w.subscriptions_per_node}",
    )
    need(w.subscribe_at >= 0, "[workload] subscribe_at", "must be ≥ 0")
    need(w.publications >= 0, "[workload] publications", "must be ≥ 0")
    need(w.publish_rate > 0, "[workload] publish_rate", f"must be > 0, got {w.publish_rate}")
    need(w.publish_start >= 0, "[workload] publish_start", "must be ≥ 0")
    need(w.payload_size >= 0, "[workload] payload_size", "must be ≥ 0")
    need(0 <= w.unsubscribe_fraction <= 1, "[workload] unsubscribe_fraction", "must be in [0, 1]")
    need(0 <= w.late_fraction <= 1, "[workload] late_fraction", "must be in [0, 1]")
    need(w.late_at >= 0, "[workload] late_at", "must be ≥ 0")
    if w.history:
        try:
            parse_history(w.history)
        except ValueError as error:
            need(False, "[workload] history", str(error).removeprefix("history: "))
    if w.late_fraction > 0 and w.history and not get_stack(r.stack).history:
        need(
            False,
            "[workload] history",
            f'stack {r.stack} keeps no topic history (set history = "" for late '
            "subscribers without it)",
        )
    need(s.trace.snapshot_interval >= 0, "[trace] snapshot_interval", "must be ≥ 0")
    need(s.init.junk_messages >= 0, "[init] junk_messages", "must be ≥ 0")
    if s.init.corruption != "none":
        kinds = ", ".join(corruption_kinds) or "none: this stack has no corrupted states"
        need(
            s.init.corruption in corruption_kinds,
            "[init] corruption",
            f"unknown corruption {s.init.corruption!r} for stack {r.stack} (kinds: {kinds})",
        )
    for i, f in enumerate(s.faults):
        key = f"[[faults]] #{i + 1}"
        need(f.at >= 0, f"{key} at", f"must be ≥ 0, got {f.at}")
        has_fraction = f.fraction is not None
        if f.fraction is not None:
            need(0 <= f.fraction <= 1, f"{key} fraction", f"must be in [0, 1], got {f.fraction}")
        bad = [x for x in f.nodes if not 0 <= x < r.nodes]
        need(not bad, f"{key} nodes", f"no such node {bad[0] if bad else ''} (0..{r.nodes - 1})")
        if f.kind in ("crash", "leave", "recover"):
            need(
                has_fraction != bool(f.nodes),
                f"{key}",
                f"a {f.kind} fault needs exactly one of fraction or nodes",
            )
        need(
            not f.durable or f.kind == "recover",
            f"{key} durable",
            f"only a recover fault brings a node back with its data directory, not a {f.kind}",
        )
        if f.role:
            roles = {"peer", *dict(infrastructure).values()}
            need(
                f.role in roles,
                f"{key} role",
                f"unknown role {f.role!r} for stack {r.stack} (roles: {', '.join(sorted(roles))})",
            )
            need(
                f.kind in ("crash", "leave") and has_fraction,
                f"{key} role",
                "only a crash or leave fraction picks by role",
            )
        if f.kind == "partition":
            ways = sum([has_fraction, f.parts > 0, bool(f.groups)])
            need(ways == 1, f"{key}", "a partition needs exactly one of fraction, parts, groups")
            need(f.parts == 0 or f.parts >= 2, f"{key} parts", "must be ≥ 2")
        if f.kind == "churn":
            need(f.rate > 0, f"{key} rate", f"must be > 0, got {f.rate}")
            need(f.until is not None and f.until > f.at, f"{key} until", "must be later than at")
            need(0 <= f.join_fraction <= 1, f"{key} join_fraction", "must be in [0, 1]")
    if problems:
        key, message = problems[0]
        raise ScenarioError(f"{where}: {key}: {message}")


# --------------------------------------------------------------------------------------------
# A small TOML writer for the canonical form (tables, arrays of tables, inline tables, scalars)
# --------------------------------------------------------------------------------------------
def dump_toml(data: dict[str, Any]) -> str:
    """Canonical TOML: sections in a fixed order, keys sorted, nested tables inline (written by
    :mod:`pubmesh.tomlio`, the project's one TOML writer)."""
    from pubmesh import tomlio

    def inline(path: tuple[str, ...]) -> bool:
        # [section] and [stack.<name>] are tables; anything deeper is an inline table
        return len(path) >= 3 or (len(path) == 2 and path[0] != "stack")

    order = ["run", "network", "workload", "init", "trace"]
    tables = {k: v for k, v in data.items() if not (k == "faults" and not v)}
    return tomlio.dumps(tables, order=order, inline=inline)
