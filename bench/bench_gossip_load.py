"""Gossip under concurrent publications (does the tree stay a tree?): RMR, LDH and latency against
the publication rate and against the spread of link latencies, Plumtree beside eager flooding.

Runs the two sweeps ``scenarios/grids/gossip_load.toml`` (rate 0.5 … 16/s) and
``scenarios/grids/gossip_load_spread.toml`` (8/s, links 5 ms to 10 … 500 ms) as Spark tasks
(local mode unless ``--master``), prints one table per sweep with Plumtree's figures beside
flooding's on the same seeds, and draws both curves into ``OUT/gossip_load.png``. The figures
are the later half of each run's publications (``rmr_late``, ``ldh_late``: once the first
broadcasts have shaped the tree) and the run's first-delivery latency p50 and p99.
``--reuse`` reads the sweeps' ``summary.json`` from OUT instead of running them again.

    PYTHONPATH=src .venv/bin/python bench/bench_gossip_load.py [--out out/bench/gossip_load]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
#: name: (grid file, swept column, axis label, table heading)
GRIDS = {
    "rate": ("gossip_load.toml", "workload_publish_rate", "publications per second", "pubs/s"),
    "spread": ("gossip_load_spread.toml", "network_latency_max", "largest link latency (s)",
               "max link s"),
}  # fmt: skip


def sweep(name: str, out: Path, master: str | None) -> dict[str, Any]:
    """Run one grid (or, with ``--reuse``, read its summary) and return its summary."""
    from pubmesh.analysis.spark import get_session
    from pubmesh.analysis.sweep import load_grid, run_sweep

    target = out / name
    grid = load_grid(ROOT / "scenarios" / "grids" / GRIDS[name][0])
    run_sweep(get_session(master), grid, target)
    return json.loads((target / "summary.json").read_text())


def rows(summary: dict[str, Any], column: str) -> dict[bool, list[dict[str, Any]]]:
    """The comparison rows per mode (flood or not), sorted by the swept value."""
    by_mode: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for row in summary["comparison"]:
        by_mode[row["stack_gossip_flood"] == "True"].append(row)
    for mode_rows in by_mode.values():
        mode_rows.sort(key=lambda r: float(r[column]))
    return by_mode


def table(name: str, summary: dict[str, Any]) -> Table:
    _, column, label, short = GRIDS[name]
    modes = rows(summary, column)
    out = Table(title=f"Plumtree beside flooding against {label} (means over seeds)")
    for heading in (short, "RMR late", "LDH late", "flood LDH", "÷ flood", "p50 ms",
                    "flood p50", "p99 ms", "rel."):  # fmt: skip
        out.add_column(heading, justify="right")
    for tree, flood in zip(modes[False], modes[True], strict=True):
        out.add_row(
            tree[column],
            f"{tree['rmr_late_mean']:.3f}",
            f"{tree['ldh_late_mean']:.2f}",
            f"{flood['ldh_late_mean']:.2f}",
            f"{tree['ldh_late_mean'] / flood['ldh_late_mean']:.2f}",
            f"{1000 * tree['latency_p50_mean']:.0f}",
            f"{1000 * flood['latency_p50_mean']:.0f}",
            f"{1000 * tree['latency_p99_mean']:.0f}",
            f"{min(tree['reliability_mean'], flood['reliability_mean']):.3f}",
        )
    return out


def figure(summaries: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(summaries), 3, figsize=(12, 3.3 * len(summaries)), squeeze=False)
    for line, (name, summary) in zip(axes, summaries.items(), strict=True):
        _, column, label, _ = GRIDS[name]
        for flood, mode_rows in rows(summary, column).items():
            x = [float(r[column]) for r in mode_rows]
            style = {"marker": "o", "capsize": 3, "label": "flooding" if flood else "Plumtree"}
            for ax, metric, scale in zip(
                line, ("rmr_late", "ldh_late", "latency_p50"), (1, 1, 1000), strict=True
            ):
                ax.errorbar(
                    x,
                    [scale * r[f"{metric}_mean"] for r in mode_rows],
                    yerr=[scale * (r[f"{metric}_std"] or 0) for r in mode_rows],
                    **style,
                )
        for ax, metric in zip(line, ("RMR (later half)", "LDH (later half)", "latency p50 ms"),
                              strict=True):  # fmt: skip
            ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel(metric)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=8)
    fig.suptitle("1,000 gossip nodes, 60 publications: Plumtree under concurrent broadcasts")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "gossip_load")
    parser.add_argument("--master", default=None, help="Spark master (default: local[*])")
    parser.add_argument("--reuse", action="store_true", help="read OUT/*/summary.json")
    args = parser.parse_args(argv)
    console = Console()
    summaries: dict[str, dict[str, Any]] = {}
    for name in GRIDS:
        existing = args.out / name / "summary.json"
        if args.reuse:
            if not existing.exists():
                console.print(f"--reuse: {existing} does not exist")
                return 2
            summaries[name] = json.loads(existing.read_text())
        else:
            summaries[name] = sweep(name, args.out, args.master)
        console.print(table(name, summaries[name]))
    figure(summaries, args.out / "gossip_load.png")
    console.print(f"plot: {args.out / 'gossip_load.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
