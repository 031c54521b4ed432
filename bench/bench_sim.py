"""Simulator benchmarks (issue 2). Not a test: prints figures for BENCHMARKS.md.

1. Events per second of a 10,000-node gossip run, beside a bare ``heapq`` event loop timed in
   the same process: the ratio is the figure (goal ≥ 0.5). Both are timed in CPU seconds of
   this process (time.process_time), so load from other processes does not skew the ratio.
2. The largest overlay built by protocol joins plus one broadcast within 3 minutes and 12 GiB
   (target 10^6 nodes): each size runs in a child process under RLIMIT_AS = 12 GiB and a
   180-second timeout; sizes grow until one fails.

    .venv/bin/python bench/bench_sim.py [--quick]
"""

from __future__ import annotations

import argparse
import heapq
import json
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
console = Console()

TEN_K = """
[run]
stack = "gossip"
nodes = {nodes}
seed = 1
duration = {duration}
start_spread = {spread}
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 1
subscriptions_per_node = 1
publications = {pubs}
publish_start = {publish_start}
publish_rate = 10.0
[trace]
messages = "counts"
"""


def bare_heapq_loop(events: int) -> float:
    """The reference: a minimal discrete-event loop with the simulator's event shape. Each
    popped event schedules one new event at a random later time, so the heap keeps its size;
    a trivial handler is called per event. Returns events per second."""
    rng = random.Random(1)
    heap: list[tuple[float, int, int, int, int, object, float]] = []
    seq = 0
    for i in range(10_000):
        seq += 1
        heap.append((rng.random(), seq, 0, i, i, None, 0.0))
    heapq.heapify(heap)
    handled = 0

    def handler(node: int, src: int, message: object) -> int:
        return node + src

    start = time.process_time()
    for _ in range(events):
        t, _s, _kind, a, b, c, _d = heapq.heappop(heap)
        handled += handler(a, b, c)
        seq += 1
        heapq.heappush(heap, (t + rng.uniform(0.005, 0.05), seq, 0, b, a, c, t))
    return events / (time.process_time() - start)


def gossip_events_per_second(nodes: int) -> dict[str, float]:
    from pubmesh.sim.runner import run_scenario
    from pubmesh.sim.scenario import parse_scenario

    text = TEN_K.format(nodes=nodes, duration=40.0, spread=10.0, pubs=100, publish_start=25.0)
    scenario = parse_scenario(text, source="bench-10k")
    with tempfile.TemporaryDirectory() as tmp:
        cpu = time.process_time()
        result = run_scenario(scenario, Path(tmp) / "run")
        cpu = time.process_time() - cpu
    stats = dict(result.stats)
    # CPU seconds of this process, not wall time: other processes on the machine do not
    # change it, so the ratio to the bare loop (also CPU-timed) is comparable across runs
    stats["events_per_cpu_second"] = stats["events_processed"] / cpu
    return stats


def child(nodes: int) -> None:
    """Run in a child process: joins of ``nodes`` nodes, then one broadcast."""
    from pubmesh.sim.runner import run_scenario
    from pubmesh.sim.scenario import parse_scenario

    spread = max(5.0, nodes / 5000)
    text = TEN_K.format(
        nodes=nodes, duration=spread + 25.0, spread=spread, pubs=1, publish_start=spread + 15.0
    )
    scenario = parse_scenario(text, source=f"bench-{nodes}")
    with tempfile.TemporaryDirectory() as tmp:
        result = run_scenario(scenario, Path(tmp) / "run")
    print(json.dumps(result.stats))


def largest_overlay(sizes: list[int], limit_s: int, limit_bytes: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    children_cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    for nodes in sizes:

        def limit() -> None:
            # 3 minutes of CPU (other processes on the machine do not count against it)
            # and 12 GiB of address space
            resource.setrlimit(resource.RLIMIT_CPU, (limit_s, limit_s + 5))
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(nodes)],
                capture_output=True,
                text=True,
                timeout=limit_s,
                preexec_fn=limit,
            )
        except subprocess.TimeoutExpired:
            rows.append({"nodes": nodes, "ok": False, "why": f"over {5 * limit_s} wall s"})
            break
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            if proc.returncode in (-9, -24):  # SIGKILL / SIGXCPU from RLIMIT_CPU
                why = f"over {limit_s} CPU s"
            elif "MemoryError" in proc.stderr:
                why = "out of memory"
            else:
                why = proc.stderr.strip()[-200:]
            rows.append({"nodes": nodes, "ok": False, "why": why})
            break
        stats = json.loads(proc.stdout.strip().splitlines()[-1])
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - children_cpu
        children_cpu += cpu
        delivered = stats["deliveries"]
        rows.append(
            {
                "nodes": nodes,
                "ok": delivered == nodes,
                "wall": wall,
                "cpu": cpu,
                "peak_gib": stats["peak_memory_bytes"] / 2**30,
                "delivered": delivered,
                "events": stats["events_processed"],
            }
        )
        if delivered != nodes:
            break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=int)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    console.print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"{__import__('os').cpu_count()} cores, Python {platform.python_version()}"
    )
    nodes = 2_000 if args.quick else 10_000
    stats = gossip_events_per_second(nodes)
    bare = bare_heapq_loop(int(stats["events_processed"]))
    table = Table(title=f"simulator events per CPU second ({nodes:,}-node gossip run)")
    for col in ("loop", "events", "events/CPU s", "ratio"):
        table.add_column(col, justify="right")
    sim_rate = stats["events_per_cpu_second"]
    table.add_row(
        "pubmesh sim (gossip, counts trace)",
        f"{stats['events_processed']:,}",
        f"{sim_rate:,.0f}",
        f"{sim_rate / bare:.3f}",
    )
    table.add_row("bare heapq loop", f"{stats['events_processed']:,}", f"{bare:,.0f}", "1.000")
    console.print(table)

    sizes = [10_000, 30_000] if args.quick else [10_000, 30_000, 100_000, 300_000, 1_000_000]
    rows = largest_overlay(sizes, 180, 12 * 2**30)
    table = Table(title="largest overlay: protocol joins + one broadcast, ≤ 180 CPU s, ≤ 12 GiB")
    for col in ("nodes", "result", "CPU s", "wall s", "peak GiB", "delivered", "events"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['nodes']:,}",
            "ok" if r["ok"] else f"failed: {r.get('why', '')}",
            f"{r.get('cpu', 0):.1f}",
            f"{r.get('wall', 0):.1f}",
            f"{r.get('peak_gib', 0):.2f}",
            f"{r.get('delivered', '')}",
            f"{r.get('events', '')}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
