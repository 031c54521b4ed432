"""``pubmesh demo`` (``make demo``): the default experiment, as a sweep, and its report.

Every stack this build has × failed fraction 0, 0.1, 0.5, 0.85 × 3 seeds (``--quick``: one seed;
``--fractions``: other fractions).
Each stack runs the demo scenario its spec names (``StackSpec.demo_scenario``), whose first fault
crashes a fraction of the nodes before publishing starts; gossip runs Henriques & Pamplona §4 (17
nodes, 50 topics, 680 publications). The grid is written to ``OUT/grid.toml`` (``pubmesh sweep
OUT/grid.toml`` reruns it), simulated as Spark tasks and analysed in one Spark job. The printed
table has the shape of Henriques & Pamplona's Tables 1-3, totals over seeds:

* Table 1: publications expected at subscribers, received, reliability;
* Table 2: eager (payload) messages against lazy messages (the *repair* role of the stack's
  spec: its dissemination layer's control traffic, e.g. Plumtree's IHave/Graft/Prune);
* Table 3: membership messages (the *maintenance* role: every other message);

plus mean latency, RMR and LDH.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pubmesh.analysis import compare
from pubmesh.analysis.sweep import Grid, SweepResult, column_name, load_grid, run_sweep
from pubmesh.errors import UserError

FRACTIONS = (0.0, 0.1, 0.5, 0.85)


def scenarios_dir() -> Path:
    """The shipped scenarios (package data: ``pubmesh/scenarios``)."""
    from pubmesh.catalog import SHIPPED

    return SHIPPED


def demo_scenarios() -> dict[str, str]:
    """stack -> its demo scenario file name, for every stack of this build that has one."""
    from pubmesh.stacks.base import available_stacks, get_stack

    specs = [get_stack(name) for name in available_stacks()]
    return {spec.name: spec.demo_scenario for spec in specs if spec.demo_scenario}


def failure_note() -> str:
    """What "failed" means per stack: the share of the workload nodes crashed, or, where a
    stack's demo scenario gives its fault a ``role``, the share of the nodes of that role
    (brokertree crashes brokers: its clients are leaves that fail alone)."""
    from pubmesh.scenario.model import load_scenario

    directory = scenarios_dir()
    roles = []
    for stack, name in sorted(demo_scenarios().items()):
        path = directory / name
        if not path.exists():
            continue
        faults = load_scenario(path).faults
        if faults and faults[0].role:
            roles.append(f'{stack}: of its {faults[0].role}s (role = "{faults[0].role}" in {name})')
    note = "failed = the share of the nodes crashed before publishing starts"
    if roles:
        note += "; " + "; ".join(roles) + "; the others: of the workload nodes"
    return note


def message_roles(spark: Any) -> Any:
    """(stack, layer, payload, role) for every message class of every stack of this build:
    the role (payload, repair, maintenance) its spec gives it."""
    from pubmesh.proto.core import MESSAGE_INFO
    from pubmesh.stacks.base import available_stacks, get_stack

    rows = {
        (name, info.layer, info.payload, get_stack(name).role_of(info.layer, info.payload))
        for name in available_stacks()
        for info in MESSAGE_INFO.values()
    }
    return spark.createDataFrame(
        sorted(rows), "stack string, layer string, payload boolean, role string"
    )


def parse_fractions(text: str) -> tuple[float, ...]:
    """``--fractions 0,0.5``: the failed fractions to sweep, each in [0, 1), none twice."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise UserError(
            f"--fractions {text!r}: give failed fractions as numbers, e.g. --fractions 0,0.5"
        ) from None
    bad = [v for v in values if not 0.0 <= v < 1.0]
    if bad:
        raise UserError(
            f"--fractions {text!r}: {bad[0]:g} is not a fraction of the nodes in [0, 1)"
        )
    if len(set(values)) != len(values):
        raise UserError(f"--fractions {text!r}: a fraction is given twice")
    return values


def write_grid(out: Path, seeds: list[int], fractions: tuple[float, ...] = FRACTIONS) -> Path:
    directory = scenarios_dir()
    bases = [
        str(directory / name) for name in demo_scenarios().values() if (directory / name).exists()
    ]
    if not bases:
        raise UserError(f"{directory}: no demo scenarios found; run pubmesh demo from the checkout")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "grid.toml"
    path.write_text(
        "# pubmesh demo: every stack × failed fraction × seeds (pubmesh sweep this file)\n"
        f"seeds = {seeds}\n\n[grid]\n"
        f"scenario = [{', '.join(repr(b).replace(chr(39), chr(34)) for b in bases)}]\n"
        f'"faults.0.fraction" = [{", ".join(str(f) for f in fractions)}]\n'
    )
    return path


def paper_table(spark: Any, sweep: SweepResult) -> list[dict[str, Any]]:
    """Rows of the Tables 1-3 shaped table: one per (stack, failed fraction), totals over
    seeds, computed with Spark from the per-run and per-message-type metrics."""
    from pyspark.sql import functions as F

    grid: Grid = sweep.grid
    fraction = column_name("faults.0.fraction")
    points = spark.createDataFrame(
        [
            (r["run_id"], str(dict(grid.tasks[r["index"]].values)["faults.0.fraction"]))
            for r in sweep.results
            if r.get("ok")
        ],
        f"run_id string, {fraction} string",
    )
    runs = sweep.analysis.metrics.runs.select("run_id", "stack")
    roles = F.broadcast(message_roles(spark))
    kinds = (
        sweep.analysis.metrics.node_messages.join(runs, ["run_id"])
        .join(roles, ["stack", "layer", "payload"], "left")
        .withColumn(
            "role",
            F.coalesce("role", F.when(F.col("payload"), "payload").otherwise("maintenance")),
        )
        .groupBy("run_id")
        .agg(
            *(
                F.sum(F.when(F.col("role") == role, F.col("sent")).otherwise(0)).alias(name)
                for role, name in (
                    ("payload", "eager"),
                    ("repair", "lazy"),
                    ("maintenance", "membership"),
                )
            )
        )
    )
    table = (
        sweep.analysis.metrics.runs.join(points, ["run_id"])
        .join(kinds, ["run_id"], "left")
        .groupBy("stack", fraction)
        .agg(
            F.count("*").alias("runs"),
            F.sum("expected").alias("expected"),
            F.sum("delivered").alias("received"),
            F.sum("eager").alias("eager"),
            F.sum("lazy").alias("lazy"),
            F.sum("membership").alias("membership"),
            F.avg("latency_p50").alias("latency_p50"),
            F.avg("rmr_mean").alias("rmr"),
            F.avg("ldh_mean").alias("ldh"),
        )
        .orderBy("stack", F.col(fraction).cast("double"))
    )
    return [row.asDict() | {"fraction": float(row[fraction])} for row in table.collect()]


def print_paper_table(rows: list[dict[str, Any]], seeds: list[int], console: Console) -> None:
    table = Table(
        title="Tables 1-3 of Henriques & Pamplona in shape: every stack × failed nodes, "
        f"totals over seeds {', '.join(map(str, seeds))}"
    )
    for column in (
        "stack", "failed", "expected", "received", "reliability", "eager", "lazy",
        "eager/lazy", "membership", "latency p50 ms", "RMR", "LDH",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column == "stack" else "right")
    for r in rows:
        expected, received = r["expected"] or 0, r["received"] or 0
        table.add_row(
            r["stack"],
            f"{r['fraction']:.0%}",
            f"{expected:,}",
            f"{received:,}",
            f"{received / expected:.2%}" if expected else "–",
            f"{r['eager'] or 0:,}",
            f"{r['lazy'] or 0:,}",
            f"{(r['eager'] or 0) / r['lazy']:.2f}" if r["lazy"] else "–",
            f"{r['membership'] or 0:,}",
            "–" if r["latency_p50"] is None else f"{r['latency_p50'] * 1000:.1f}",
            "–" if r["rmr"] is None else f"{r['rmr']:.2f}",
            "–" if r["ldh"] is None else f"{r['ldh']:.2f}",
        )
    console.print(table)
    console.print(failure_note())


def paper_table_html(rows: list[dict[str, Any]]) -> str:
    from pubmesh.analysis.report import html_table

    shaped = [
        r
        | {
            "failed": f"{r['fraction']:.0%}",
            "reliability": (r["received"] or 0) / r["expected"] if r["expected"] else None,
        }
        for r in rows
    ]
    columns = [
        ("failed", "failed", "{}"),
        ("expected", "expected", "{:,}"),
        ("received", "received", "{:,}"),
        ("reliability", "reliability", "{:.2%}"),
        ("eager", "eager", "{:,}"),
        ("lazy", "lazy", "{:,}"),
        ("membership", "membership", "{:,}"),
        ("latency_p50", "latency p50 ms", "ms"),
        ("rmr", "RMR", "{:.2f}"),
        ("ldh", "LDH", "{:.2f}"),
    ]
    return html_table(shaped, columns, first="stack") + f"<p>{html.escape(failure_note())}</p>"


def run_demo(
    spark: Any,
    out: Path,
    *,
    quick: bool,
    progress: bool,
    console: Console,
    static: bool = False,
    fractions: tuple[float, ...] = FRACTIONS,
) -> list[dict[str, Any]]:
    seeds = [1] if quick else [1, 2, 3]
    grid = load_grid(write_grid(out, seeds, fractions))
    sweep = run_sweep(
        spark,
        grid,
        out,
        progress=progress,
        console=console,
        title="pubmesh demo: every stack × "
        + "/".join(f"{f * 100:g}" for f in fractions)
        + "% of the nodes failed",
        static=static,
        report=False,
    )
    rows = paper_table(spark, sweep)
    sweep.write_report(
        out / "report.html",
        [
            compare.section(sweep, rows),
            (
                "Tables 1-3 of Henriques & Pamplona in shape (totals over seeds)",
                paper_table_html(rows),
            ),
        ],
    )
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["paper_table"] = rows
    summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    print_paper_table(rows, seeds, console)
    return rows
