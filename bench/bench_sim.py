"""Simulator benchmarks. Not a test: prints figures for BENCHMARKS.md.

1. ``rate``: events per CPU second of a 10,000-node gossip run, beside a bare ``heapq`` event
   loop timed in the same process: the ratio is the figure (goal ≥ 0.10 pure Python, ≥ 0.15
   compiled). Both are CPU seconds of this process (time.process_time), so load from other
   processes does not skew the ratio.
2. ``memory``: bytes per idle gossip node (goal ≤ 6 KiB), tracemalloc over a whole warm-started
   simulation, beside one ``random.Random`` per node measured the same way.
3. ``warm``: one broadcast over a warm-started overlay (``[init] overlay = "warm"``) of 10^5,
   3·10^5 and 10^6 nodes, gossip then skipring (goal: 10^6 all delivered in ≤ 180 CPU s and
   12 GiB). Each size runs in a child process under RLIMIT_CPU = 180 s and RLIMIT_AS = 12 GiB.
4. ``joins``: the largest overlay built by protocol joins plus one broadcast in the same limits
   (goal ≥ 150,000 nodes); sizes grow until one fails.

    .venv/bin/python bench/bench_sim.py [--quick] [--only rate|memory|warm|joins]
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
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
#: 120 columns when the output is a file or a pipe (Rich's default there, 80, cuts the size
#: tables' cells short: "1,000,0…")
console = Console(width=None if sys.stdout.isatty() else 120)

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
[stack.gossip]
tree = "plumtree"
"""
#: the gossip runs pin the paper's tree (tree = "plumtree"): this file measures the simulator
#: against its earlier records, and the rooted tree, the default now,
#: adds its beacon rounds (about 2.5 messages per node per second) to the events measured
GOSSIP_TREE = '[stack.gossip]\ntree = "plumtree"\n'


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
    from pubmesh.scenario.model import parse_scenario
    from pubmesh.sim.runner import run_scenario

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
    from pubmesh.scenario.model import parse_scenario
    from pubmesh.sim.runner import leave_to_exit, run_scenario

    spread = max(5.0, nodes / 5000)
    text = TEN_K.format(
        nodes=nodes, duration=spread + 25.0, spread=spread, pubs=1, publish_start=spread + 15.0
    )
    scenario = parse_scenario(text, source=f"bench-{nodes}")
    with tempfile.TemporaryDirectory() as tmp:
        result = run_scenario(scenario, Path(tmp) / "run")
        leave_to_exit()  # the child ends after its line of JSON, as `pubmesh sim` does
    print(json.dumps(result.stats))


WARM = """
[run]
stack = "{stack}"
nodes = {nodes}
seed = 1
duration = {duration}
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 1
subscriptions_per_node = 1
publications = {publications}
publish_start = {publish_start}
[init]
overlay = "warm"
[trace]
messages = "counts"
{extra}"""
#: (publish at, run until) per stack: the broadcast and little else. Gossip's first shuffles
#: come at 5 s or later. Skipring's timeouts run every second from the start (each
#: subscriber's first at a uniform time in [0, 1)) and cannot be left out, but the run ends
#: soon after the broadcast: its last delivery comes at 0.63–0.73 s from 10^5 to 10^6 nodes
#: (the tables' "last at"); to 2.0 s it ran a second more of upkeep alone
WARM_TIMES = {"gossip": (1.0, 4.0), "skipring": (0.25, 1.0)}


def warm_child(stack: str, nodes: int) -> None:
    """Run in a child process: a warm-started overlay of ``nodes`` nodes, one broadcast."""
    from pubmesh.scenario.model import parse_scenario
    from pubmesh.sim.runner import leave_to_exit, run_scenario

    publish_start, duration = WARM_TIMES[stack]
    text = WARM.format(
        stack=stack,
        nodes=nodes,
        duration=duration,
        publish_start=publish_start,
        publications=1,
        extra=GOSSIP_TREE if stack == "gossip" else "",
    )
    scenario = parse_scenario(text, source=f"bench-warm-{stack}-{nodes}")
    with tempfile.TemporaryDirectory() as tmp:
        result = run_scenario(scenario, Path(tmp) / "run")
        leave_to_exit()  # the child ends after its line of JSON, as `pubmesh sim` does
    stats = dict(result.stats)
    # every workload node subscribes; skipring's supervisor (node 0) is infrastructure
    stats["subscribers"] = nodes - (1 if stack == "skipring" else 0)
    print(json.dumps(stats))


def idle_gossip_memory(nodes: int, idle: float = 25.0) -> dict[str, float]:
    """Bytes per idle gossip node: tracemalloc over a whole warm-started simulation (plan,
    nodes, pending timers, counters) after ``idle`` simulated seconds with no publication,
    beside one ``random.Random`` per node measured the same way (the node's own stream, the
    Mersenne Twister's 2.5 KiB of state, is part of the figure)."""
    import gc
    import tracemalloc

    from pubmesh.scenario.model import parse_scenario
    from pubmesh.sim.engine import Simulation

    text = WARM.format(
        stack="gossip",
        nodes=nodes,
        duration=idle,
        publish_start=idle + 1,
        publications=0,
        extra=GOSSIP_TREE,
    )
    scenario = parse_scenario(text, source=f"bench-memory-{nodes}")
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    sim = Simulation(scenario, keep_deliveries=False)
    sim.run()
    gc.collect()
    total = tracemalloc.get_traced_memory()[0] - base
    del sim
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    streams = [random.Random(i) for i in range(nodes)]
    reference = tracemalloc.get_traced_memory()[0] - base
    del streams
    tracemalloc.stop()
    return {"per_node": total / nodes, "random_per_node": reference / nodes}


def limited(args: list[str], limit_s: int, limit_bytes: int) -> tuple[dict[str, object], str]:
    """Run this script with ``args`` in a child under RLIMIT_CPU = ``limit_s`` and RLIMIT_AS =
    ``limit_bytes``: (its last JSON line, or {}), and why it failed ("" if it did not)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limit_s, limit_s + 5))
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    try:
        proc = subprocess.run(
            [sys.executable, __file__, *args],
            capture_output=True,
            text=True,
            timeout=5 * limit_s,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        return {}, f"over {5 * limit_s} wall s"
    if proc.returncode != 0:
        if proc.returncode in (-9, -24):  # SIGKILL / SIGXCPU from RLIMIT_CPU
            return {}, f"over {limit_s} CPU s"
        if "MemoryError" in proc.stderr:
            return {}, "out of memory"
        return {}, proc.stderr.strip()[-200:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result, ""


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def grow(
    child_args: Callable[[int], list[str]], sizes: list[int], limit_s: int, limit_bytes: int
) -> list[dict[str, object]]:
    """Run this script's child ``child_args(n)`` for each size ``n`` in a limited process
    (:func:`limited`), until one fails or misses a subscriber; one table row per size."""
    rows: list[dict[str, object]] = []
    for nodes in sizes:
        before = _children_cpu()
        start = time.perf_counter()
        stats, why = limited(child_args(nodes), limit_s, limit_bytes)
        cpu = _children_cpu() - before  # user + sys, what RLIMIT_CPU counts
        if why:
            rows.append(
                {
                    "nodes": nodes,
                    "ok": False,
                    "why": why,
                    "cpu": cpu,
                    "wall": time.perf_counter() - start,
                }
            )
            break
        delivered = int(str(stats["deliveries"]))
        ok = delivered == int(str(stats.get("subscribers", nodes)))
        rows.append(
            {
                "nodes": nodes,
                "ok": ok,
                "cpu": cpu,
                "wall": time.perf_counter() - start,
                "peak_gib": float(str(stats["peak_memory_bytes"])) / 2**30,
                "delivered": delivered,
                "last": stats.get("last_delivery_at"),
                "events": stats["events_processed"],
            }
        )
        if not ok:
            break
    return rows


#: events each timing of the bare loop runs (about 2 s on this machine)
BARE_EVENTS = 2_000_000


def bracketed_rate(nodes: int) -> dict[str, float]:
    """The gossip run's events per CPU s between two timings of the bare loop, one just
    before and one just after it: this VM's speed drifts by 10-25% within minutes, and one
    reference timed after the run alone moved the ratio as much as a change to the code."""
    before = bare_heapq_loop(BARE_EVENTS)
    stats = gossip_events_per_second(nodes)
    after = bare_heapq_loop(BARE_EVENTS)
    rate = stats["events_per_cpu_second"]
    bare = (before + after) / 2
    return {
        "events": stats["events_processed"],
        "events_per_cpu_second": rate,
        "bare_before": before,
        "bare_after": after,
        "bare": bare,
        "ratio": rate / bare,
    }


def events_table(nodes: int) -> None:
    r = bracketed_rate(nodes)
    table = Table(title=f"simulator events per CPU second ({nodes:,}-node gossip run)")
    for col in ("loop", "events", "events/CPU s", "ratio"):
        table.add_column(col, justify="right")
    table.add_row(
        "pubmesh sim (gossip, counts trace)",
        f"{r['events']:,.0f}",
        f"{r['events_per_cpu_second']:,.0f}",
        f"{r['ratio']:.3f}",
    )
    table.add_row("bare heapq loop, before the run", "", f"{r['bare_before']:,.0f}", "")
    table.add_row("bare heapq loop, after the run", "", f"{r['bare_after']:,.0f}", "")
    table.add_row("bare heapq loop, mean (the reference)", "", f"{r['bare']:,.0f}", "1.000")
    console.print(table)


def size_table(title: str, rows: list[dict[str, object]]) -> None:
    table = Table(title=title)
    cols = ("nodes", "result", "CPU s", "wall s", "peak GiB", "delivered", "last at", "events")
    for col in cols:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['nodes']:,}",
            "ok" if r["ok"] else f"failed: {r.get('why', '')}",
            _cell(r.get("cpu"), "{:.1f}"),
            _cell(r.get("wall"), "{:.1f}"),
            _cell(r.get("peak_gib"), "{:.2f}"),
            _cell(r.get("delivered"), "{:,}"),
            _cell(r.get("last"), "{:.3f}"),
            _cell(r.get("events"), "{:,}"),
        )
    table.caption = (
        "CPU s: user + system of the child, as its limit counts them; last at: the simulated"
        " time of the last delivery; – not known"
    )
    console.print(table)


def _cell(value: object, spec: str) -> str:
    """A table cell: ``value`` formatted, or – for a figure a killed child never reported."""
    return "–" if value is None else spec.format(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--warm", nargs=2, metavar=("STACK", "NODES"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument(
        "--only", choices=("rate", "memory", "warm", "joins"), help="one table (default: all)"
    )
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.warm:
        warm_child(args.warm[0], int(args.warm[1]))
        return
    console.print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"{__import__('os').cpu_count()} cores, Python {platform.python_version()}"
    )
    limit_s, limit_bytes = 180, 12 * 2**30
    if args.only in (None, "rate"):
        events_table(2_000 if args.quick else 10_000)
    if args.only in (None, "memory"):
        nodes = 5_000 if args.quick else 20_000
        memory = idle_gossip_memory(nodes)
        table = Table(title=f"memory per idle gossip node ({nodes:,} warm-started, 25 s idle)")
        for col in ("what", "bytes per node"):
            table.add_column(col, justify="right")
        table.add_row("whole simulation ÷ nodes (goal ≤ 6,144)", f"{memory['per_node']:,.0f}")
        table.add_row("reference: one random.Random", f"{memory['random_per_node']:,.0f}")
        console.print(table)
    if args.only in (None, "warm"):
        for stack in ("gossip", "skipring"):
            sizes = [10_000, 30_000] if args.quick else [100_000, 300_000, 1_000_000]
            rows = grow(lambda n, s=stack: ["--warm", s, str(n)], sizes, limit_s, limit_bytes)
            publish_at, until = WARM_TIMES[stack]
            size_table(
                f"{stack}: one broadcast over a warm-started overlay, ≤ 180 CPU s"
                f" (published at {publish_at} s, run to {until} s)",
                rows,
            )
    if args.only in (None, "joins"):
        sizes = [10_000, 30_000] if args.quick else [60_000, 100_000, 150_000, 200_000, 300_000]
        rows = grow(lambda n: ["--child", str(n)], sizes, limit_s, limit_bytes)
        size_table("largest overlay: protocol joins + one broadcast, ≤ 180 CPU s, ≤ 12 GiB", rows)


if __name__ == "__main__":
    main()
