"""The Spark subcommands: ``pubmesh analyze``, ``pubmesh sweep`` and ``pubmesh demo``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from pubmesh.errors import UserError

MASTER_HELP = (
    "Spark master URL (default: $PUBMESH_SPARK_MASTER, else local[*], Spark embedded in this "
    "process; e.g. spark://host:7077 for a cluster)"
)
ANALYZE_MASTER_HELP = (
    "Spark master URL (default: $PUBMESH_SPARK_MASTER, else the warm Spark that `pubmesh spark "
    "start` keeps if it runs, else local[*] embedded in this process); spark://host:7077 for a "
    "cluster, sc://host:port for a Spark Connect server"
)
STATIC_HELP = (
    "PNG charts instead of interactive ones (drawn in headless Chromium; also written to "
    "OUT/figures/ for papers): no JavaScript, a smaller file"
)


def _console() -> Any:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from pubmesh.analysis.job import STEPS, TASK_STEPS, analyze, in_tasks
    from pubmesh.analysis.load import inspect
    from pubmesh.analysis.progress import AnalysisProgress
    from pubmesh.analysis.report import print_runs
    from pubmesh.analysis.spark import SMALL_INPUT_BYTES, get_session, is_connect, master_of

    roots = [Path(p) for p in args.run_dir]
    # fail on a bad trace before paying for the JVM
    sources = [inspect(root) for root in roots]
    size = sum(source.size for source in sources)
    _check_static(args)
    out = Path(args.out) if args.out else _default_out(roots)
    console = _console()
    started = time.perf_counter()
    with console.status("starting Spark…", spinner="dots"):
        spark = get_session(args.master, small=size <= SMALL_INPUT_BYTES, warm=True)
    where = master_of(spark)
    try:
        tasks = args.engine == "tasks" or (args.engine == "auto" and in_tasks(sources))
        steps = TASK_STEPS if tasks else STEPS
        with AnalysisProgress(spark, console, steps) as progress:
            analysis = analyze(
                spark, sources, out, static=args.static, step=progress.step,
                engine="tasks" if tasks else "plan",
            )  # fmt: skip
    finally:
        if is_connect(spark):  # the server drops this session's cached tables now
            spark.stop()
    print_runs(analysis.rows, f"pubmesh analyze ({len(analysis.rows)} runs)", console)
    console.print(
        f"metrics: {out / 'metrics'}  summary: {out / 'summary.json'}  "
        f"({time.perf_counter() - started:.1f} s on {where})"
    )
    if where.startswith("local") and not args.master:
        console.print(
            "tip: `pubmesh spark start` keeps a warm Spark that the next analysis uses "
            "(no JVM start)", style="dim", highlight=False,
        )  # fmt: skip
    # last, on a line of its own: what a terminal lets one click to open
    console.print(f"report: {(out / 'report.html').resolve().as_uri()}", highlight=False)
    return 0


def _check_static(args: argparse.Namespace) -> None:
    """--static needs Chromium: say so before the simulations and the JVM, not after."""
    if args.static:
        from pubmesh.analysis.report import chromium_path

        chromium_path()


def _default_out(roots: list[Path]) -> Path:
    if len(roots) == 1:
        return roots[0] / "analysis"
    return Path("out") / "analysis"


def _cmd_sweep(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from pubmesh.analysis.spark import get_session
    from pubmesh.analysis.sweep import load_grid, print_comparison, run_sweep
    from pubmesh.catalog import find

    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    grid = load_grid(find(args.grid, kind="grid"), seeds=seeds)
    _check_static(args)
    out = Path(args.out) if args.out else Path("out") / "sweeps" / Path(args.grid).stem
    console = _console()
    console.print(
        f"{len(grid.points)} grid points × {len(grid.seeds)} seeds = {len(grid.tasks)} "
        f"simulations, as Spark tasks"
    )
    # a swept parameter that changes nothing, a fault after the last publication (still
    # run: say so)
    for line in [*grid.warnings, *grid.timing]:
        console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False)
    # a grid of small runs analyses like a small trace: all start-up and one-off plans
    spark = get_session(args.master, small=grid.small)
    sweep = run_sweep(
        spark, grid, out, progress=not args.quiet, console=console, static=args.static
    )
    print_comparison(sweep, console, f"pubmesh sweep {grid.path.name}: mean ± sd over seeds")
    console.print(
        f"traces: {out / 'traces'}  metrics: {out / 'metrics'}  "
        f"report: [bold]{out / 'report.html'}[/]"
    )
    return 1 if sweep.failures else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from pubmesh.analysis.demo import FRACTIONS, parse_fractions, run_demo
    from pubmesh.analysis.spark import get_session

    fractions = parse_fractions(args.fractions) if args.fractions else FRACTIONS
    out = Path(args.out)
    _check_static(args)
    console = _console()
    started = time.perf_counter()
    # the quick grid (one seed) writes ~26 MB of traces, under SMALL_INPUT_BYTES; the full
    # grid's three seeds about three times that, over it
    spark = get_session(args.master, small=args.quick)
    run_demo(
        spark, out, quick=args.quick, progress=not args.quiet, console=console,
        static=args.static, fractions=fractions,
    )  # fmt: skip
    console.print(
        f"report: [bold]{out / 'report.html'}[/]  grid: {out / 'grid.toml'}  "
        f"({time.perf_counter() - started:.0f} s)"
    )
    return 0


def _cmd_spark(args: argparse.Namespace) -> int:
    from pubmesh.analysis import warm

    if args.idle <= 0:
        raise UserError(f"--idle {args.idle:g}: give a positive number of minutes")
    if args.action == "start":
        found = warm.running()
        if found is not None:
            print(f"warm Spark already runs at {found.url} (pid {found.pid})")
            return 0
        started = time.perf_counter()
        server = warm.start(idle_minutes=args.idle, memory=args.memory, prewarm=args.warm_up)
        print(
            f"warm Spark runs at {server.url} (pid {server.pid}, started in "
            f"{time.perf_counter() - started:.1f} s); pubmesh analyze uses it; it stops after "
            f"{server.idle_minutes:g} min idle or on `pubmesh spark stop`; log: {warm.log_path()}"
        )
        if args.warm_up:
            print(
                "it now warms itself up with one analysis of a small run (about 10 s on two "
                "cores, in the background); `pubmesh spark status` says when it is warm"
            )
        return 0
    if args.action == "stop":
        stopped = warm.stop()
        print("warm Spark stopped" if stopped else "no warm Spark runs")
        return 0
    up = warm.running()
    if up is None:
        print("no warm Spark runs (start one: pubmesh spark start)")
        return 1
    directory = warm.state_dir()
    left = max(0.0, up.idle_minutes * 60 - warm.idle_for(directory, up))
    print(
        f"warm Spark runs at {up.url} (pid {up.pid}, up {(time.time() - up.started) / 60:.0f} "
        f"min, PySpark {up.pyspark}, {'warm' if warm.warmed_up(directory) else 'warming up'}); "
        f"stops after {left / 60:.0f} more min idle; "
        f"log: {warm.log_path(directory)}"
    )
    return 0


def register(sub: Any) -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    analyze = sub.add_parser(
        "analyze",
        help="turn run traces into metrics, a summary and an HTML report (PySpark)",
        description=(
            "Analyse one or many run directories (pubmesh sim, cluster) or sweep datasets with\n"
            "PySpark. Metrics as docs/design.md names them: per publication (expected, delivered,\n"
            "reliability, duplicates, latency p50/p95/p99/max, hops, LDH, RMR), per node\n"
            "(messages by type and layer, control overhead, load, deliveries) and per run\n"
            "(reliability, history_reliability, order_violations, load max/mean/Gini, degree,\n"
            "diameter, convergence_time, supervisor_messages, config_requests).\n\n"
            "Writes OUT/metrics/*.parquet, OUT/summary.json and OUT/report.html: one file that\n"
            "opens offline, with interactive charts (hover for run and value, click a legend\n"
            "entry to hide a run, drag to zoom, the camera icon saves a PNG). --static draws\n"
            "the same charts as PNG (in headless Chromium) into the page and OUT/figures/.\n\n"
            "How Spark runs it (--engine): a run whose trace is at most 64 MB of Parquet is\n"
            "analysed whole in one Spark task, many runs side by side (auto, tasks); larger\n"
            "runs by one Spark plan over every run's rows, spread over the cluster (plan).\n"
            "Both give the same tables."
        ),
        epilog=(
            "examples:\n"
            "  pubmesh sim scenarios/paper004_fail50.toml --out runs/p50\n"
            "  pubmesh analyze runs/p50                      # -> runs/p50/analysis/report.html\n"
            "  pubmesh analyze runs/a runs/b --out out/ab    # several runs, one report\n"
            "  pubmesh analyze runs/p50 --master spark://head:7077\n"
            "  pubmesh analyze runs/p50 --static             # PNG charts for a paper\n"
        ),
        formatter_class=formatter,
    )
    analyze.add_argument("run_dir", nargs="+", help="run directories or sweep datasets")
    analyze.add_argument("--out", help="output directory (default RUN_DIR/analysis)")
    analyze.add_argument("--master", help=ANALYZE_MASTER_HELP)
    analyze.add_argument("--static", action="store_true", help=STATIC_HELP)
    analyze.add_argument(
        "--engine", choices=("auto", "tasks", "plan"), default="auto",
        help="one Spark task per run (tasks), one Spark plan over all runs (plan), or tasks "
        "when every run is at most 64 MB (auto, the default)",
    )  # fmt: skip
    analyze.set_defaults(func=_cmd_analyze)

    sweep = sub.add_parser(
        "sweep",
        help="run a scenario × parameter grid × seeds as Spark tasks and compare",
        description=(
            "Simulate every (grid point, seed) of GRID.toml as one Spark task, gather the\n"
            "traces in one dataset partitioned by run_id, analyse them in one Spark job and\n"
            "write a comparison report (mean and sd over seeds per grid point, each metric\n"
            "plotted against each swept parameter). A failed task is reported with its seed\n"
            "and replay command; the others still complete (exit status 1 then).\n\n"
            "GRID.toml:\n"
            '  base = "../scenarios/paper004_fail50.toml"   # relative to the grid file\n'
            "  seeds = [1, 2, 3]                            # or a count: seeds = 3\n"
            "  [grid]                                       # every combination is a point\n"
            '  "faults.0.fraction" = [0.0, 0.1, 0.5, 0.85]  # any pubmesh sim --set key\n'
            '  "stack.gossip.active_view" = [3, 4]\n'
            "  [set]                                        # fixed overrides\n"
            '  "run.duration" = 120.0\n'
            'The grid key "scenario" = ["a.toml", "b.toml"] sweeps base scenarios (e.g. stacks).'
        ),
        epilog=(
            "examples:\n"
            "  pubmesh sweep scenarios/grids/paper004_failures.toml\n"
            "  pubmesh sweep GRID.toml --seeds 1,2 --out out/try --master spark://head:7077\n"
        ),
        formatter_class=formatter,
    )
    sweep.add_argument("grid", help="grid TOML file")
    sweep.add_argument("--out", help="output directory (default out/sweeps/<grid name>)")
    sweep.add_argument("--seeds", help="comma-separated seeds, overriding the grid's")
    sweep.add_argument("--master", help=MASTER_HELP)
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.add_argument("--static", action="store_true", help=STATIC_HELP)
    sweep.set_defaults(func=_cmd_sweep)

    demo = sub.add_parser(
        "demo",
        help="the default experiment: every stack × 0/10/50/85%% failed, report and tables",
        description=(
            "The main job behind `make demo`: every stack this build has × failed fraction\n"
            "0, 0.1, 0.5, 0.85 × 3 seeds, simulated as Spark tasks and analysed on Spark, then\n"
            "OUT/report.html and a table in the shape of Tables 1-3 of Henriques & Pamplona's\n"
            "report (sent, received, reliability; eager vs lazy messages; membership messages)\n"
            "with latency, RMR and LDH. Gossip runs that report's §4 (17 nodes, 50 topics, 680\n"
            "publications); docs/protocols/gossip.md cites it.\n"
            "About 2-4 minutes on 2 cores; --quick (one seed) about one minute."
        ),
        epilog=(
            "examples:\n  pubmesh demo\n  pubmesh demo --quick --out /tmp/demo\n"
            "  pubmesh demo --quick --fractions 0,0.5   # a first look in half the time\n"
        ),
        formatter_class=formatter,
    )
    demo.add_argument("--out", default="out/demo", help="output directory (default out/demo)")
    demo.add_argument("--quick", action="store_true", help="one seed instead of three")
    demo.add_argument(
        "--fractions", metavar="F,F,...",
        help="failed fractions of the nodes to sweep (default 0,0.1,0.5,0.85)",
    )  # fmt: skip
    demo.add_argument("--master", help=MASTER_HELP)
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.add_argument("--static", action="store_true", help=STATIC_HELP)
    demo.set_defaults(func=_cmd_demo)

    spark = sub.add_parser(
        "spark",
        help="keep a warm Spark for pubmesh analyze: start, status, stop",
        description=(
            "A long-lived local Spark (a Spark Connect server in a background process) that\n"
            "every later `pubmesh analyze` uses instead of starting its own JVM. Once started\n"
            "it warms itself up with one analysis of a small run, so that an analysis of a\n"
            "small run takes seconds. It listens on 127.0.0.1 only and needs a\n"
            "token kept in a private directory ($PUBMESH_SPARK_STATE, else\n"
            "/tmp/pubmesh-spark-<uid>), so only your own processes can use it. It stops\n"
            "after --idle minutes without an analysis, or on `pubmesh spark stop`.\n"
            "sweep and demo run simulations as Spark tasks (RDDs, which Spark Connect lacks)\n"
            "and start their own Spark; --master and $PUBMESH_SPARK_MASTER take precedence."
        ),
        epilog=(
            "examples:\n"
            "  pubmesh spark start               # once; about 10 s\n"
            "  pubmesh analyze runs/a            # uses it\n"
            "  pubmesh spark status              # exit 0 if it runs, 1 if not\n"
            "  pubmesh spark stop\n"
        ),
        formatter_class=formatter,
    )
    spark.add_argument("action", choices=("start", "status", "stop"))
    spark.add_argument(
        "--idle", type=float, default=30.0, metavar="MINUTES",
        help="start: stop by itself after this many minutes without an analysis (default 30)",
    )  # fmt: skip
    spark.add_argument(
        "--memory", metavar="SIZE",
        help="start: the JVM's heap (default $PUBMESH_SPARK_MEMORY, else 4g)",
    )  # fmt: skip
    spark.add_argument(
        "--no-warm-up", dest="warm_up", action="store_false",
        help="start: skip the warm-up analysis of a small run (the first real call is slower)",
    )  # fmt: skip
    spark.set_defaults(func=_cmd_spark)


__all__ = ["UserError", "register"]
