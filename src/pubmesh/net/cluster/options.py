"""``pubmesh cluster``'s command line: its flags, and the run they describe.

The workload file takes the keys of scenario files; the command line adds the stack, the
number of nodes, ``--kill FRACTION@SECONDS`` (a ``[[faults]]`` crash of that fraction of the
live workload nodes at that time), the duration, the seed and ``--set`` overrides. All of them
are applied to the scenario as data — the file parsed, the kills appended to its faults, the
``--set`` overrides applied by the scenario loader's own override function — and the result
is written by :mod:`pubmesh.tomlio` and validated by the scenario loader, so a value reaches
the run exactly as it was given. Without ``--duration`` (or a duration in the file or a
``--set``) the run lasts until the last publication or fault plus :data:`DRAIN_SECONDS`; that
needs the validated workload, so the scenario is then read once without a duration first.

The workload plan (:mod:`.workload`) is made here, before any process starts, so a
bad workload is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pubmesh import tomlio
from pubmesh.catalog import find
from pubmesh.errors import ScenarioError, UserError
from pubmesh.net.acl import load_acl
from pubmesh.net.cluster.netns import NetnsLayout, require_root
from pubmesh.net.cluster.workload import plan
from pubmesh.net.identity import check_authority
from pubmesh.net.security import KEY_ENV, ClusterKey, load_key
from pubmesh.net.transport import net_config
from pubmesh.scenario.model import Scenario, apply_override, parse_scenario, timing_warnings
from pubmesh.scenario.workload import WorkloadPlan
from pubmesh.stacks.base import get_stack

DESCRIPTION = """\
Start N node processes on 127.0.0.1, run a workload on the workload file's clock (each
start, subscription, publication and fault at its time from the run's start, as in
`pubmesh sim`), kill a fraction of the nodes if asked, stop everything and gather one run directory
(trace v1, runtime "net") that `pubmesh analyze` reads like a simulated run.

The workload file takes the keys of scenario files (`pubmesh sim --help`): [workload]
topics, subscriptions_per_node, subscribe_at, publications, publish_start, publish_rate,
publisher, payload_size, ...; [run] seed, duration, start_spread; [[faults]] of kind
crash, leave or recover (the killed processes started again on the same port; durable = true
needs --data-dir: the node restarts on its directory, its subscriptions, delivered ids and
stack state; durable = false gives it a fresh empty directory), and with --netns partition
and heal; [stack.<name>] parameters. The same file and seed make the same subscriptions,
publishers and victims as in the simulator.

--netns K (root) runs the nodes in K network namespaces on one bridge, each node on its own
private address; nodes fill the namespaces in blocks (12 over 3: 0-3, 4-7, 8-11). A
partition fault with groups = [[0, 1, 2, 3, 4, 5, 6, 7]] then cuts the links between
namespaces 0-1 and 2 for real until a heal fault restores them.

Without a workload file: one topic, every node subscribed, publications of 100 bytes at 20
per second from t = 2 s for as long as the run lasts: until 3 s before the end of
--duration, else until 3 s after the last --kill, else 100 of them. A fault after the last
publication (a workload file's) is warned about in one line: it would change no delivery.

A live table shows each node's neighbours and deliveries. Ctrl-C stops every node."""

EPILOG = """\
examples:
  pubmesh cluster --stack gossip --nodes 12
  pubmesh cluster --stack gossip --nodes 32 --kill 0.25@6 --duration 15 --out runs/net32
  pubmesh cluster --stack skipring --nodes 12 --workload net_small   # a shipped scenario
  sudo pubmesh cluster --stack gossip --nodes 12 --netns 3   # across 3 network namespaces
  pubmesh analyze runs/net32
"""

DEFAULT_WORKLOAD = """\
[run]
start_spread = 0.0
[workload]
topics = 1
subscriptions_per_node = 1
publications = 100
publish_start = 2.0
publish_rate = 20.0
payload_size = 100
"""

#: seconds a run without a duration lasts after its last publication or fault
DRAIN_SECONDS = 3.0
MAX_NODES = 512


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="run a local cluster of node processes with a workload and gather its trace",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", required=True, help="stack to run (see `pubmesh stacks`)")
    parser.add_argument(
        "--nodes", type=int, default=12, help="processes, infrastructure included (default 12)"
    )
    parser.add_argument("--workload", metavar="FILE", help="TOML with scenario keys (see above)")
    parser.add_argument(
        "--kill",
        action="append",
        default=[],
        metavar="FRACTION@SECONDS[:ROLE]",
        help="SIGKILL that fraction of the live workload nodes at that time, e.g. 0.25@6, or "
        "of the live nodes of a role of the stack, e.g. 0.15@6:broker (repeatable)",
    )
    parser.add_argument("--duration", type=float, metavar="S", help="seconds the run lasts")
    parser.add_argument("--seed", type=int, help="seed of the workload and the nodes")
    parser.add_argument("--out", metavar="DIR", help="run directory (default runs/net-...)")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace the run directory if one is there (without it, a rerun is refused)",
    )
    parser.add_argument(
        "--key",
        metavar="FILE",
        help="cluster key (default: $PUBMESH_KEY, else a fresh random key for this run)",
    )
    parser.add_argument(
        "--identity",
        action="store_true",
        help="identity mode: TLS 1.3 links and a certificate per node from a fresh cluster "
        "authority made for this run (OUT/identity), or from --ca",
    )
    parser.add_argument(
        "--ca",
        metavar="DIR",
        help="identity mode with this authority (from pubmesh ca init; its ca.key signs "
        "the nodes' certificates)",
    )
    parser.add_argument(
        "--acl",
        metavar="FILE",
        help="identity mode: topic permissions for every node (a TOML file of [[rule]]s; "
        "see docs/security.md)",
    )
    parser.add_argument(
        "--unsigned",
        action="store_true",
        help="identity mode without signed publications (every node's --unsigned): the "
        "price of signatures, for benchmarks",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set workload.publications=500 or "
        "--set stack.gossip.fanout=3 (repeatable)",
    )
    parser.add_argument(
        "--net",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a transport setting for every node (repeatable; pubmesh node --net), e.g. "
        "--net memory_budget=33554432 or --net suspect_after=3",
    )
    parser.add_argument(
        "--snapshot-interval",
        type=float,
        default=None,
        metavar="S",
        help="seconds between overlay snapshots in the trace (default: [trace] of the file)",
    )
    parser.add_argument(
        "--wait-overlay",
        type=float,
        default=0.0,
        metavar="S",
        help="at the first publication, wait up to S seconds for the overlay and shift the "
        "rest of the schedule by the wait (recorded in the trace). Default 0: every event "
        "at the workload file's time, as in pubmesh sim; a late overlay is reported",
    )
    parser.add_argument(
        "--keep-partial",
        action="store_true",
        help="keep the nodes' partial traces (OUT/.partial) after gathering",
    )
    parser.add_argument(
        "--no-message-trace",
        action="store_true",
        help="leave frames out of the trace (for benchmarks; RMR and load need them)",
    )
    parser.add_argument(
        "--netns",
        type=int,
        default=0,
        metavar="K",
        help="root only: place the nodes in K network namespaces joined by veth links and a "
        "bridge, each node on its own private address, so traffic crosses real interfaces "
        "(removed when the run ends; leftovers of a killed run at the next start)",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="every node serves live metrics (/metrics, OpenMetrics) on a free port of its "
        "address; the Prometheus scrape configuration for them is printed and written to "
        "OUT/prometheus.yml once the nodes are up",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="give node I the data directory DIR/node-I (pubmesh node --data-dir: its address, "
        "contacts, subscriptions and recent deliveries survive a restart; made 0700)",
    )
    parser.add_argument("--quiet", action="store_true", help="no live table, no summary")
    return parser


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterConfig:
    scenario: Scenario
    plan: WorkloadPlan
    out: Path
    key_file: Path | None
    key_text: str | None
    #: ``--wait-overlay``: seconds the first publication may wait for the overlay (0: none)
    wait_overlay: float = 0.0
    keep_partial: bool = False
    quiet: bool = False
    snapshot_interval: float = 0.0
    trace_messages: bool = True
    #: stack parameters as --set arguments for the node processes
    param_args: tuple[str, ...] = ()
    #: transport settings as --net arguments for the node processes
    net_args: tuple[str, ...] = ()
    #: ``--netns K``: namespaces the nodes are placed in (0: all on 127.0.0.1)
    netns: int = 0
    #: ``--metrics``: every node serves /metrics; the scrape configuration is written
    metrics: bool = False
    #: identity mode (``--identity`` or ``--ca``): the authority's directory, None for a
    #: fresh one in OUT/identity/ca
    identity: bool = False
    ca_dir: Path | None = None
    #: identity mode without signed publications (``--unsigned``)
    unsigned: bool = False
    #: identity mode: every node's topic permissions (``--acl``)
    acl_file: Path | None = None
    #: ``--data-dir``: node I keeps its memory in DIR/node-I
    data_dir: Path | None = None

    @property
    def signed(self) -> bool:
        """The nodes sign their publications (and draw their ids themselves)."""
        return self.identity and not self.unsigned


@dataclass(frozen=True)
class Kill:
    """``--kill FRACTION@SECONDS[:ROLE]``: SIGKILL that fraction of the live workload nodes
    then, or of the live nodes of ``role``."""

    fraction: float
    at: float
    role: str = ""

    def as_fault(self) -> dict[str, Any]:
        """The ``[[faults]]`` table it stands for."""
        fault: dict[str, Any] = {"at": self.at, "kind": "crash", "fraction": self.fraction}
        if self.role:
            fault["role"] = self.role
        return fault


def parse_kill(text: str) -> Kill:
    fraction_text, sep, rest = text.partition("@")
    at_text, _, role = rest.partition(":")
    try:
        if not sep:
            raise ValueError
        fraction, at = float(fraction_text), float(at_text)
    except ValueError:
        raise UserError(
            f"--kill {text!r}: write FRACTION@SECONDS[:ROLE], e.g. 0.25@6 or 0.15@6:broker"
        ) from None
    if not 0 <= fraction <= 1:
        raise UserError(f"--kill {text!r}: the fraction must be in [0, 1]")
    if at < 0:
        raise UserError(f"--kill {text!r}: the time must be ≥ 0 seconds")
    return Kill(fraction, at, role.strip())


def _read_workload(workload_file: str | None) -> tuple[dict[str, Any], str, str]:
    """The workload as data, where it came from (for messages), and the run's default name."""
    if workload_file is not None:
        path = Path(workload_file)
        if not path.exists():
            path = find(workload_file)  # a shipped scenario by name, e.g. net_small
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ScenarioError(f"--workload {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ScenarioError(f"--workload {path}: cannot read it ({error})") from None
        source, name = str(path), path.stem
    else:
        text, source, name = DEFAULT_WORKLOAD, "<default workload>", "cluster"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{source}: not valid TOML: {error}") from None
    return data, source, name


def build_scenario(
    stack: str,
    nodes: int,
    *,
    workload_file: str | None = None,
    kills: list[Kill] | None = None,
    duration: float | None = None,
    seed: int | None = None,
    settings: list[str] | None = None,
) -> Scenario:
    """The scenario a cluster runs: the workload file (or the default workload) with the
    command line's stack, nodes, kills, duration and seed, and the ``--set`` settings.

    Everything is applied to the parsed data (``--set`` after ``--stack``/``--nodes``, so it
    can change them; ``--seed`` and ``--duration`` last, so they win), then written once."""
    data, source, name = _read_workload(workload_file)
    default_workload = workload_file is None and not any(
        s.split("=", 1)[0].strip() in ("workload.publications", "workload.publish_rate")
        for s in settings or []
    )
    if kills:
        faults = data.setdefault("faults", [])
        if not isinstance(faults, list):
            raise ScenarioError(f"{source}: faults must be an array of tables ([[faults]])")
        faults.extend(kill.as_fault() for kill in kills)
    run = _run_table(data, source)
    run["stack"] = stack
    run["nodes"] = nodes
    # after --stack and --nodes: a setting may change them; its mistakes named by its --set
    for number, setting in enumerate(settings or [], 1):
        apply_override(data, setting, source, f"--set #{number} {setting!r}")
    run = _run_table(data, source)
    if seed is not None:
        run["seed"] = seed
    run.setdefault("name", name)
    if default_workload:
        _span_publications(data, source, duration)
    if duration is None and "duration" not in run:
        # the default duration needs the validated workload: read it once without one
        probe = parse_scenario(tomlio.dumps(data), source=source)
        w = probe.workload
        end = w.publish_start + max(0, w.publications - 1) / w.publish_rate
        last_fault = max((f.at for f in probe.faults), default=0.0)
        duration = round(max(end, last_fault) + DRAIN_SECONDS, 3)
    if duration is not None:
        if duration <= 0:
            raise UserError(f"--duration {duration}: must be > 0 seconds")
        run["duration"] = float(duration)
    return parse_scenario(tomlio.dumps(data), source=source)


def _span_publications(data: dict[str, Any], source: str, duration: float | None) -> None:
    """The default workload publishes for as long as the run lasts: until DRAIN_SECONDS
    before the end of ``duration``, else until DRAIN_SECONDS after the last fault and at
    least its 100 publications (a kill after the last publication tested nothing, and the
    run reported every publication delivered)."""
    probe = parse_scenario(tomlio.dumps(data), source=source)
    w = probe.workload
    last_fault = max((f.at for f in probe.faults), default=0.0)
    end = duration - DRAIN_SECONDS if duration is not None else last_fault + DRAIN_SECONDS
    wanted = math.floor((end - w.publish_start) * w.publish_rate) + 1
    workload = data.setdefault("workload", {})
    if duration is not None:
        workload["publications"] = max(1, wanted)
    else:
        workload["publications"] = max(w.publications, wanted)


def _run_table(data: dict[str, Any], source: str) -> dict[str, Any]:
    run = data.setdefault("run", {})
    if not isinstance(run, dict):
        raise ScenarioError(f"{source}: [run] must be a table")
    return run


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    try:
        spec = get_stack(args.stack)
    except KeyError as error:
        raise UserError(f"--stack: {error.args[0]}") from None
    infrastructure = len(spec.infrastructure(args.nodes, spec.params_type()))
    if args.nodes < infrastructure + 2:
        raise UserError(
            f"--nodes {args.nodes}: a {spec.name} cluster needs at least {infrastructure + 2}"
        )
    if args.nodes > MAX_NODES:
        raise UserError(f"--nodes {args.nodes}: at most {MAX_NODES} processes on one machine")
    if args.netns:
        require_root()
        NetnsLayout.check(args.netns, args.nodes)
    kills = [parse_kill(k) for k in args.kill]
    scenario = build_scenario(
        spec.name,
        args.nodes,
        workload_file=args.workload,
        kills=kills,
        duration=args.duration,
        seed=args.seed,
        settings=args.set,
    )
    for line in timing_warnings(scenario):
        print(f"pubmesh: warning: {line}", file=sys.stderr)
    check_recoveries(scenario, data_dir=args.data_dir is not None)
    workload_plan = plan(scenario, netns=max(0, args.netns))
    key_file = Path(args.key) if args.key else None
    key_text: str | None = None
    identity = bool(args.identity or args.ca)
    ca_dir = Path(args.ca) if args.ca else None
    if identity and key_file is not None:
        raise UserError("--key and --identity/--ca: a cluster runs in one mode, not both")
    if args.unsigned and not identity:
        raise UserError("--unsigned: only identity mode (--identity or --ca) signs publications")
    acl_file = Path(args.acl) if args.acl else None
    if acl_file is not None:
        if not identity or args.unsigned:
            raise UserError(
                "--acl: permissions rest on signed publications (--identity or --ca, signed)"
            )
        load_acl(acl_file)  # one line and exit 2 now, not from every node
    if ca_dir is not None:
        check_authority(ca_dir)  # one line and exit 2 now, not once the nodes are due
    if identity:
        pass  # the nodes' certificates are issued once their addresses are chosen
    elif key_file is not None:
        load_key(key_file)  # validate now: one line and exit 2 if it is missing or weak
    elif os.environ.get(KEY_ENV):
        load_key(None)
    else:
        _key, key_text = ClusterKey.generate()
    out = (
        Path(args.out)
        if args.out
        else Path("runs")
        / (f"net-{spec.name}-n{args.nodes}-s{scenario.run.seed}-{time.strftime('%Y%m%dT%H%M%S')}")
    )
    from pubmesh.sim.runner import claim_run_dir  # (the simulator's modules: only here)

    claim_run_dir(out, args.force)  # a previous run there: refused unless --force
    snapshot = (
        args.snapshot_interval
        if args.snapshot_interval is not None
        else scenario.trace.snapshot_interval
    )
    if snapshot < 0 or args.wait_overlay < 0:
        raise UserError("--snapshot-interval and --wait-overlay must be ≥ 0")
    net_config(args.net)  # refused here, in one line, before any node starts
    return ClusterConfig(
        scenario=scenario,
        plan=workload_plan,
        out=out,
        key_file=key_file,
        key_text=key_text,
        wait_overlay=args.wait_overlay,
        keep_partial=args.keep_partial,
        quiet=args.quiet,
        snapshot_interval=snapshot,
        trace_messages=not args.no_message_trace,
        param_args=stack_param_args(scenario),
        net_args=tuple(args.net),
        netns=args.netns,
        metrics=args.metrics,
        identity=identity,
        ca_dir=ca_dir,
        unsigned=args.unsigned,
        acl_file=acl_file,
        data_dir=_data_dir(args.data_dir),
    )


def check_recoveries(scenario: Scenario, *, data_dir: bool) -> None:
    """Refuse, in one line, a ``durable = true`` recover without ``--data-dir``: a node
    restarted durably comes back with what its data directory holds, and without one it
    has none."""
    for index, fault in enumerate(scenario.faults):
        if fault.kind == "recover" and fault.durable and not data_dir:
            raise UserError(
                f"{scenario.source}: [[faults]] #{index + 1}: a durable recover needs "
                "--data-dir (the node comes back with what its data directory holds)"
            )


def _data_dir(text: str | None) -> Path | None:
    """``--data-dir``: made 0700 now, or refused in one line if others can write it."""
    if text is None:
        return None
    from pubmesh.net.store import data_directory

    return data_directory(Path(text).resolve(), "the cluster's data directories")


def stack_param_args(scenario: Scenario) -> tuple[str, ...]:
    """The scenario's stack parameters that differ from the defaults, as ``--set KEY=VALUE``
    arguments for ``pubmesh node`` (values in TOML, as the node's scenario loader reads)."""
    params = scenario.stack_params
    defaults = type(params)()
    args: list[str] = []
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if value == getattr(defaults, f.name):
            continue
        try:
            args.append(f"{f.name}={tomlio.dumps_value(value)}")
        except tomlio.TomlWriteError:
            raise UserError(f"cannot pass stack parameter value {value!r} to a node") from None
    return tuple(args)
