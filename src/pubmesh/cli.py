"""The ``pubmesh`` command. Subcommands map one-to-one onto the layers of docs/design.md."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from pubmesh import __version__
from pubmesh.errors import UserError

TOUR = """\
pubmesh runs publish/subscribe without a central broker, on self-organizing overlays.
The same protocol code runs in a deterministic simulator and over real TCP, and every run
leaves a Parquet trace.

A short tour:

  1. Simulate 1,000 gossip nodes (HyParView + Plumtree) and keep the trace:
       pubmesh sim scenarios/gossip_1000.toml --seed 3 --out runs/g1000
  2. Change anything from the command line, e.g. crash 80% of the nodes:
       pubmesh sim scenarios/gossip_crash.toml --set faults.0.fraction=0.8
  3. Turn the trace into metrics, a summary and an HTML report with plots (PySpark);
     `pubmesh spark start` first keeps a warm Spark that every later analysis uses:
       pubmesh analyze runs/g1000
  4. Sweep a parameter grid × seeds as Spark tasks and compare the grid points:
       pubmesh sweep scenarios/grids/paper004_failures.toml
  5. The default experiment (every stack × 0/10/50/85% of nodes failed), report and tables:
       pubmesh demo
  6. Run real nodes on this machine, or one node with an interactive shell:
       pubmesh cluster --stack gossip --nodes 12 --duration 30 --out runs/net12
       pubmesh node --stack gossip --listen 127.0.0.1:7000

Stacks: gossip, skipring, chord, brokertree, clique, d2g (`pubmesh stacks` lists the ones
this build has, `pubmesh stacks NAME` one's parameters). Scenario files are TOML; `pubmesh
sim --help` lists every key, and `pubmesh scenarios` the shipped ones, which run by name from
any directory (`pubmesh sim gossip_crash`).
"""


def _cmd_sim(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from pubmesh.catalog import find
    from pubmesh.scenario.model import load_scenario, timing_warnings
    from pubmesh.sim.runner import SimulationStopped, claim_run_dir, leave_to_exit, run_scenario

    # each override is named in errors as the user wrote it: --set #2 'run.nodes=0'
    overrides = list(args.set or [])
    labels = [f"--set #{number} {text!r}" for number, text in enumerate(overrides, 1)]
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
        labels.append(f"--seed {args.seed}")
    scenario = load_scenario(find(args.scenario), overrides, labels)
    for line in timing_warnings(scenario):
        print(f"pubmesh: warning: {line}", file=sys.stderr)
    out = Path(args.out) if args.out else Path("runs") / f"{scenario.name}-s{scenario.run.seed}"
    claim_run_dir(out, args.force, "--out" if args.out else "run directory")
    console = Console(stderr=False)
    try:
        result = run_scenario(
            scenario, out, progress=not args.quiet and sys.stderr.isatty(), stop_on_signals=True
        )
    except SimulationStopped as stop:
        reached = stop.result.stats["simulated_seconds"]
        print(
            f"pubmesh: {stop} at t={reached:.3f} s of {scenario.run.duration:g} s; the trace so"
            f" far is in {out} (run.json says stopped)",
            file=sys.stderr,
        )
        return 128 + stop.signal_number
    if args.process_ends:
        leave_to_exit()  # the process ends after the table below
    table = Table(
        title=f"pubmesh sim: {scenario.name} ({scenario.run.stack}, seed {scenario.run.seed})"
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    s = result.stats
    for key, label, fmt in [
        ("nodes", "nodes", "{:,}"),
        ("simulated_seconds", "simulated seconds", "{:,.1f}"),
        ("events_processed", "events processed", "{:,}"),
        ("events_per_second", "events per wall second", "{:,.0f}"),
        ("messages_sent", "messages sent", "{:,}"),
        ("messages_lost", "messages lost", "{:,}"),
        ("deliveries", "deliveries", "{:,}"),
        ("last_delivery_at", "last delivery (simulated s)", "{:,.3f}"),
        ("alive_at_end", "nodes alive at the end", "{:,}"),
        ("wall_seconds", "wall seconds", "{:,.2f}"),
        ("peak_memory_bytes", "peak memory (MiB)", "{:,.0f}"),
    ]:
        value = s[key] / 2**20 if key == "peak_memory_bytes" else s[key]
        table.add_row(label, "–" if value is None else fmt.format(value))
        if key == "messages_lost" and value:
            for cause, n in _lost_by(s["messages_lost_by"]):
                table.add_row(f"  {cause}", f"{n:,}")
            table.caption = escape(LOST_CAPTION)
    console.print(table)
    console.print(f"trace: [bold]{out}[/]  (run id {result.run_id}); next: pubmesh analyze {out}")
    return 0


#: under pubmesh sim's table when messages were lost: what the figure counts
LOST_CAPTION = (
    "messages lost: sent to a node not running (not started yet, crashed or left: also in a "
    "run without faults or loss), cut by a partition, or lost to [network] loss"
)


def _lost_by(causes: dict[str, int]) -> list[tuple[str, int]]:
    """The "messages lost" figure by cause, for the rows under it (those not zero)."""
    said = {
        "receiver_not_running": "to nodes not running",
        "partition": "across a partition",
        "network_loss": "to network loss",
    }
    return [(said[cause], n) for cause, n in causes.items() if n]


def _cmd_stacks(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from pubmesh.stacks.base import STACKS, all_stack_names, available_stacks

    if args.name:
        return _stack_parameters(args.name)
    have = set(available_stacks())
    table = Table(title="pubmesh stacks")
    table.add_column("stack")
    table.add_column("status")
    table.add_column("what it is")
    for name in all_stack_names():
        spec = STACKS.get(name)
        table.add_row(
            name,
            "available" if name in have else "not yet implemented",
            spec.description if spec else "",
        )
    Console().print(table)
    print("pubmesh stacks NAME lists a stack's parameters; the README says which to use when")
    return 0


def _stack_parameters(name: str) -> int:
    """``pubmesh stacks NAME``: what the stack is and every ``[stack.NAME]`` parameter."""
    import dataclasses

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from pubmesh.stacks.base import get_stack, parameter_docs

    try:
        spec = get_stack(name)
    except KeyError as error:
        raise UserError(f"stacks {name}: {error.args[0]}") from None
    console = Console()
    kind = "content-based (filters on attributes)" if spec.content_based else "topic-based"
    console.print(f"[bold]{spec.name}[/]: {escape(spec.description)}", highlight=False)
    own = spec.create.__module__.startswith("pubmesh.")
    docs = parameter_docs(spec.params_type)
    # the parameters cite the stack's protocol notes as "spec §N": say which document that is
    cited = any("spec" in text for text in docs.values())
    notes = (
        f"; its spec, the protocol notes docs/protocols/{spec.name}.md in the repository"
        + (' ("spec §N" below is its section N)' if cited else "")
        if own
        else ""
    )
    console.print(f"{kind}{notes}", highlight=False)
    roles = sorted(set(spec.infrastructure(100, spec.params_type()).values()))
    if roles:
        console.print(f"infrastructure roles: {', '.join(roles)} (--role)", highlight=False)
    table = Table(
        title=escape(f"[stack.{spec.name}] parameters (scenario files, --set, Node(params=))")
    )
    table.add_column("parameter")
    table.add_column("default", justify="right")
    table.add_column("meaning")
    for f in dataclasses.fields(spec.params_type):
        default = getattr(spec.params_type(), f.name)
        table.add_row(f.name, escape(repr(default)), escape(docs.get(f.name, "")))
    console.print(table)
    return 0


def _cmd_scenarios(args: argparse.Namespace) -> int:
    """``pubmesh scenarios``: the shipped scenarios and grids, by name."""
    import shutil
    import textwrap

    from pubmesh.catalog import SHIPPED, entries

    # each description whole, wrapped to the terminal (never cut): a name line, then the text
    width = max(40, min(shutil.get_terminal_size().columns, 100))
    print(f"shipped scenarios and grids ({SHIPPED}):")
    for entry in entries():
        what = f"{entry.kind}, stack {entry.stack}" if entry.stack else entry.kind
        print(f"\n{entry.name} ({what})")
        for line in textwrap.wrap(entry.description, width - 4, break_on_hyphens=False):
            print(f"    {line}")
    print("\nrun one by name from anywhere: pubmesh sim NAME, pubmesh sweep GRID")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from pubmesh.scenario import model as scenario_module

    parser = argparse.ArgumentParser(
        prog="pubmesh",
        description=TOUR,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pubmesh {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sim = sub.add_parser(
        "sim",
        help="simulate a scenario deterministically and write its Parquet trace",
        description="Simulate SCENARIO.toml and write a run directory (trace v1, Parquet).\n"
        "The same scenario and seed always give the same trace, byte for byte.\n\n"
        "Scenario keys:\n" + (scenario_module.__doc__ or "").split("\n", 2)[2],
        epilog="examples:\n"
        "  pubmesh sim scenarios/gossip_1000.toml\n"
        "  pubmesh sim scenarios/paper004.toml --seed 7 --out runs/p004-s7\n"
        "  pubmesh sim scenarios/gossip_1000.toml --set run.nodes=10000 "
        "--set trace.messages=counts\n\n"
        "Ctrl-C (SIGINT), SIGTERM or a CPU limit's SIGXCPU during the run stops it between two\n"
        "events and keeps the trace up to there: run.json says stopped and how far it got;\n"
        "the exit status is 128 + the signal's number (130 for Ctrl-C).\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument("scenario", help="scenario TOML file (see scenarios/)")
    sim.add_argument("--seed", type=int, help="override [run] seed")
    sim.add_argument("--out", help="run directory to write (default runs/<name>-s<seed>)")
    sim.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set network.loss=0.05 (repeatable)",
    )
    sim.add_argument(
        "--force",
        action="store_true",
        help="replace the run directory if one is there (without it, a rerun is refused)",
    )
    sim.add_argument("--quiet", action="store_true", help="no progress bar")
    sim.set_defaults(func=_cmd_sim)

    stacks = sub.add_parser(
        "stacks",
        help="list the stacks; pubmesh stacks NAME lists one's parameters",
        description="The stacks this build has; with NAME, that stack's parameters: the "
        "[stack.NAME] keys of scenario files, with their defaults and what they do.",
    )
    stacks.add_argument("name", nargs="?", help="a stack: list its parameters")
    stacks.set_defaults(func=_cmd_stacks)
    scenarios = sub.add_parser(
        "scenarios",
        help="list the shipped scenarios and grids (pubmesh sim NAME runs one from anywhere)",
    )
    scenarios.set_defaults(func=_cmd_scenarios)

    for module in ("pubmesh.analysis.command", "pubmesh.net.command"):
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as error:
            if error.name != module:
                raise
    return parser


def _suggest_command(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """An unknown COMMAND (the first word that is not an option) is refused in one line that
    names the close command (argparse's names none) and exits 2."""
    from pubmesh.errors import did_you_mean

    first = next((w for w in words if not w.startswith("-")), None)
    if first is None or words[:1] != [first]:
        return
    commands = [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]
    if commands and first not in commands:
        print(
            f"pubmesh: error: no command {first!r}{did_you_mean(first, commands)} "
            f"(commands: {', '.join(commands)})",
            file=sys.stderr,
        )
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["node"]:
        # a node process loads its own command only: building the whole parser imports the
        # simulator, the cluster launcher and (through them) pandas, half a CPU second a node
        from pubmesh.net.node.process import main as node_main

        return node_main(words[1:])
    parser = build_parser()
    _suggest_command(parser, words)
    args = parser.parse_args(argv)
    # main() of the command line itself (argv from sys.argv): the process ends when the
    # command does; a caller that passes argv (a test, a script) runs on
    args.process_ends = argv is None
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except UserError as error:
        print(f"pubmesh: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pubmesh: interrupted", file=sys.stderr)
        return 130
    finally:
        if args.process_ends and "pyspark" in sys.modules:
            # the embedded JVM is reaped before the process ends, whatever the outcome, so
            # its CPU is ours and it outlives us by nothing
            from pubmesh.analysis.spark import end_jvm

            with contextlib.suppress(Exception):  # a JVM that will not stop changes no outcome
                end_jvm()


if __name__ == "__main__":
    sys.exit(main())
