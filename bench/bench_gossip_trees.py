"""Benchmark of the gossip trees: the paper's Plumtree tree beside the rooted tree (the default)
and eager flooding, on the same seeds in the same run, against the publication rate
(``--axis rate``) or against the spread of link latencies at 8 publications/s (``--axis
spread``: links uniform from 5 ms to the value, as ``scenarios/grids/gossip_load_spread.toml``).

Every point is ``scenarios/gossip_1000.toml`` (1,000 nodes joined through the contact, one
topic, everyone subscribed, links 5–50 ms) with 60 publications at the given rate, as in
``scenarios/grids/gossip_load.toml``. Figures over the later 30 publications: RMR, LDH (the
deepest first delivery, as the figure tests count it) and its ratio to flooding's on the same
seed; first-delivery latency p50 / p99 over all publications; control messages (everything
but payload) per node per second while the publications run (from the first publication to
the last one's end plus 2 s). Simulations run straight from Python, two at a time, without
the Spark pipeline (the pipeline's numbers for the same scenarios are the sweep's).

    PYTHONPATH=src .venv/bin/python bench/bench_gossip_trees.py [--axis rate|spread]
        [--values 0.5,2,8,16] [--seeds 1,2] [--jobs 2] [--json out/bench/gossip_trees.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "gossip_1000.toml"
MODES = {
    "plumtree": ("stack.gossip.tree=plumtree",),
    "rooted": ("stack.gossip.tree=rooted",),
    "flood": ("stack.gossip.flood=true",),
}


#: per axis: default values, the --set it takes, the fixed sets, the table's heading
AXES = {
    "rate": ("0.5,2,8,16", "workload.publish_rate", ("run.duration=160.0",), "pubs/s"),
    "spread": (
        "0.01,0.05,0.2,0.5",
        "network.latency.max",
        ("run.duration=50.0", "workload.publish_rate=8.0"),
        "max link s",
    ),
}


def run_point(axis: str, value: float, mode: str, seed: int) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from pubmesh.scenario.model import load_scenario
    from pubmesh.sim.engine import Simulation

    _, key, fixed, _ = AXES[axis]
    sets = ["workload.publications=60", *fixed, f"{key}={value}", f"run.seed={seed}", *MODES[mode]]
    scenario = load_scenario(SCENARIO, sets)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.process_time()
        sim = Simulation(scenario, Path(tmp) / "run")
        sim.run()
        sim.close()
        cpu = time.process_time() - started
        run = Path(tmp) / "run"
        pubs = sorted(pq.read_table(run / "publications").to_pylist(), key=lambda p: p["t"])
        messages = pq.read_table(run / "messages", columns=["payload", "pub_id", "t_send"])
        rows = messages.to_pylist()
    published = {p["pub_id"]: p["t"] for p in pubs}
    payload: Counter[int] = Counter(r["pub_id"] for r in rows if r["payload"])
    first: dict[int, dict[int, tuple[float, int]]] = defaultdict(dict)
    copies: Counter[tuple[int, int]] = Counter()
    for pub_id, node, t, hops in sim.deliveries:
        copies[(pub_id, node)] += 1
        first[pub_id].setdefault(node, (t, hops))
    late = [p["pub_id"] for p in pubs[len(pubs) // 2 :]]
    rmr = statistics.fmean(payload[p] / (len(first[p]) - 1) - 1 for p in late)
    ldh = statistics.fmean(max(h for _, h in first[p].values()) for p in late)
    latencies = sorted(t - published[p] for p in first for t, _ in first[p].values())
    start = pubs[0]["t"]
    end = max(t for p in first for t, _ in first[p].values()) + 2.0
    control = sum(1 for r in rows if not r["payload"] and start <= r["t_send"] <= end)
    return {
        "value": value,
        "mode": mode,
        "seed": seed,
        "reliability": sum(len(f) for f in first.values()) / (len(pubs) * len(sim.alive)),
        "duplicates": sum(c - 1 for c in copies.values()),
        "rmr_late": rmr,
        "ldh_late": ldh,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "control_per_node_s": control / len(sim.alive) / (end - start),
        "cpu_s": cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--axis", choices=sorted(AXES), default="rate")
    parser.add_argument("--values", help="the axis's values (default: the grid's)")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="per-run figures (default: out/bench/...)")
    args = parser.parse_args(argv)
    rates = [float(r) for r in (args.values or AXES[args.axis][0]).split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    points = [(args.axis, rate, mode, seed) for rate in rates for mode in MODES for seed in seeds]
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_point, *point) for point in points]
        results = [f.result() for f in track(futures, description="simulations")]
    if args.json is None:
        args.json = ROOT / "out" / "bench" / f"gossip_trees_{args.axis}.json"
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    mean: dict[tuple[float, str], dict[str, float]] = {}
    for rate in rates:
        for mode in MODES:
            mine = [r for r in results if r["value"] == rate and r["mode"] == mode]
            mean[(rate, mode)] = {
                k: statistics.fmean(r[k] for r in mine) for k in mine[0] if k not in ("mode",)
            }
    table = Table(title=f"gossip trees against {args.axis} (means over seeds {seeds})")
    headings = (AXES[args.axis][3], "tree", "RMR late", "LDH late", "÷ flood", "p50 ms",
                "p99 ms", "control/node/s", "reliability", "dups", "CPU s")  # fmt: skip
    for heading in headings:
        table.add_column(heading, justify="right")
    for rate in rates:
        flood_ldh = mean[(rate, "flood")]["ldh_late"]
        for mode in MODES:
            m = mean[(rate, mode)]
            table.add_row(
                f"{rate:g}", mode, f"{m['rmr_late']:.3f}", f"{m['ldh_late']:.2f}",
                f"{m['ldh_late'] / flood_ldh:.2f}", f"{m['p50_ms']:.0f}", f"{m['p99_ms']:.0f}",
                f"{m['control_per_node_s']:.2f}", f"{m['reliability']:.4f}",
                f"{m['duplicates']:.0f}", f"{m['cpu_s']:.1f}",
            )  # fmt: skip
    Console(width=160).print(table)
    print(f"per-run figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
