"""Benchmark: large traces stay analysable.

Runs ``pubmesh analyze`` (the whole job: every metric, the report, the plots) in a child
process on two large traces and measures what the driver used:

* ``counts``: a ``messages = "counts"`` trace of a 100,000-node gossip simulation (a
  warm-started overlay, 20 publications, 25 simulated seconds, one overlay snapshot), made by
  ``pubmesh sim`` once and cached (17.6M events: about 20 minutes on a 2-core machine). The
  report must say which metrics such a trace cannot give
  (RMR per publication, the false-positive rate) instead of failing.
* ``full``: the synthetic full trace of ``bench/bench_analysis.py`` (default 10^8 message
  rows, 20,000 publications), generated once and cached.

For each: the wall time; the driver JVM's heap limit (``spark.driver.memory``, set through
``PUBMESH_SPARK_MEMORY``), its peak heap in use (``jstat -gc`` sampled every second: survivor,
eden and old generation used) and its peak resident memory; the peak resident memory of the
Python driver. A run that fails (an out-of-memory error included) is reported as failed with
its last error line, and the benchmark exits 1.

    .venv/bin/python bench/bench_analysis_scale.py                       # both
    .venv/bin/python bench/bench_analysis_scale.py --only full --messages 20000000
    .venv/bin/python bench/bench_analysis_scale.py --driver-memory 2g
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analysis import cached_trace
from bench_analysis import row_count as rows

PUBMESH = str(Path(sys.executable).with_name("pubmesh"))

COUNTS_SCENARIO = """
[run]
stack = "gossip"
nodes = {nodes}
seed = 1
duration = 25.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[workload]
topics = 1
subscriptions_per_node = 1
publications = 20
publish_start = 2.0
publish_rate = 1.0
[init]
overlay = "warm"
[trace]
messages = "counts"
snapshot_interval = 20.0
"""

#: the report section a counts trace must carry (pubmesh.analysis.job.counts_note)
COUNTS_SECTION = "What message-count traces cannot give"


@dataclass
class Peaks:
    """Peak memory of a process tree, sampled every ``interval`` seconds."""

    interval: float = 1.0
    python_rss: int = 0
    jvm_rss: int = 0
    jvm_heap_used: int = 0
    jvm_pid: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def watch(self, root: int) -> None:
        while not self.stop.is_set():
            self.python_rss = max(self.python_rss, rss(root))
            if self.jvm_pid is None:
                self.jvm_pid = next(
                    (p for p in descendants(root) if cmdline(p)[0].endswith(b"java")), None
                )
            if self.jvm_pid is not None:
                self.jvm_rss = max(self.jvm_rss, rss(self.jvm_pid))
                self.jvm_heap_used = max(self.jvm_heap_used, heap_used(self.jvm_pid))
            self.stop.wait(self.interval)


def cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return [b""]


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        out += [int(c) for c in children]
        todo += [int(c) for c in children]
    return out


def rss(pid: int) -> int:
    """Resident memory of ``pid`` in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def heap_used(pid: int) -> int:
    """Heap in use of JVM ``pid`` in bytes, by ``jstat -gc`` (0 if it cannot tell)."""
    try:
        out = subprocess.run(
            ["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=10
        ).stdout.split("\n")
        head, values = out[0].split(), out[1].split()
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return 0
    row = dict(zip(head, values, strict=False))
    try:
        return int(sum(float(row[k]) for k in ("S0U", "S1U", "EU", "OU")) * 1024)
    except (KeyError, ValueError):
        return 0


def analyze(run: Path, out: Path, memory: str) -> dict[str, object]:
    """``pubmesh analyze run --out out`` in a child, its peaks measured."""
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PUBMESH_SPARK_MEMORY=memory)
    started = time.perf_counter()
    child = subprocess.Popen(
        [PUBMESH, "analyze", str(run), "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    peaks = Peaks()
    watcher = threading.Thread(target=peaks.watch, args=(child.pid,), daemon=True)
    watcher.start()
    output, _ = child.communicate()
    wall = time.perf_counter() - started
    peaks.stop.set()
    watcher.join()
    lines = [line for line in output.splitlines() if line.strip()]
    return {
        "exit": child.returncode,
        "wall_s": wall,
        "driver_memory": memory,
        "jvm_heap_used_peak": peaks.jvm_heap_used,
        "jvm_rss_peak": peaks.jvm_rss,
        "python_rss_peak": peaks.python_rss,
        "last_line": lines[-1] if lines else "",
    }


def counts_trace(root: Path, nodes: int) -> Path:
    run = root / f"counts-n{nodes}"
    if (run / "runs").exists():
        return run
    scenario = root / f"counts-n{nodes}.toml"
    root.mkdir(parents=True, exist_ok=True)
    scenario.write_text(COUNTS_SCENARIO.format(nodes=nodes))
    shutil.rmtree(run, ignore_errors=True)
    subprocess.run([PUBMESH, "sim", str(scenario), "--out", str(run)], check=True)
    return run


def gib(n: object) -> str:
    return f"{n / 2**30:.2f}" if isinstance(n, int) else "–"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("counts", "full"))
    parser.add_argument("--nodes", type=int, default=100_000, help="counts trace's nodes")
    parser.add_argument("--messages", type=int, default=100_000_000, help="full trace's rows")
    parser.add_argument("--publications", type=int, default=20_000)
    parser.add_argument("--driver-memory", default="4g", help="spark.driver.memory")
    parser.add_argument("--out", default="out/bench/analysis")
    parser.add_argument("--json", help="write the figures here as JSON")
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    console = Console()
    root = Path(args.out).resolve()
    results: dict[str, dict[str, object]] = {}
    if args.only in (None, "counts"):
        with console.status(f"simulating {args.nodes:,} nodes (counts trace)…"):
            run = counts_trace(root, args.nodes)
        with console.status("pubmesh analyze on the counts trace…"):
            result = analyze(run, run / "analysis", args.driver_memory)
        report = run / "analysis" / "report.html"
        result["rows"] = (
            f"{args.nodes:,} nodes: {rows(run, 'message_counts'):,} message counts, "
            f"{rows(run, 'deliveries'):,} deliveries, {rows(run, 'snapshots'):,} snapshot rows"
        )
        result["counts_note"] = report.exists() and COUNTS_SECTION in report.read_text()
        results["counts"] = result
    if args.only in (None, "full"):
        with console.status(f"generating {args.messages:,} message rows (once, cached)…"):
            run = cached_trace(root, args.messages, args.publications)
        with console.status("pubmesh analyze on the full trace…"):
            result = analyze(run, run / "analysis", args.driver_memory)
        result["rows"] = (
            f"{rows(run, 'messages'):,} messages, {rows(run, 'deliveries'):,} deliveries"
        )
        results["full"] = result

    table = Table(title="pubmesh analyze on large traces (whole job: metrics, report, plots)")
    for column in ("trace", "result", "wall s", "driver memory", "heap peak GiB",
                   "JVM RSS GiB", "Python RSS GiB"):  # fmt: skip
        table.add_column(column, justify="right")
    failed = False
    for name, r in results.items():
        ok = r["exit"] == 0 and (name != "counts" or r["counts_note"])
        failed |= not ok
        table.add_row(
            name, "ok" if ok else f"FAILED: {r['last_line']}"[:80],
            f"{r['wall_s']:.0f}", str(r["driver_memory"]), gib(r["jvm_heap_used_peak"]),
            gib(r["jvm_rss_peak"]), gib(r["python_rss_peak"]),
        )  # fmt: skip
    console.print(table)
    for name, r in results.items():
        console.print(f"{name}: {r['rows']}")
    if "counts" in results:
        console.print(
            "counts trace: the report "
            + ("names" if results["counts"]["counts_note"] else "does NOT name")
            + " the metrics it cannot give"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
