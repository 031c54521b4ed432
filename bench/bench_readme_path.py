"""The README's analysis path, timed as a user runs it.

    .venv/bin/python bench/bench_readme_path.py [--out DIR]

In order, each a fresh ``pubmesh`` process: the loop figure (a bare Python loop of 10⁷
additions, median of five); ``pubmesh sim gossip_1000 --seed 3`` (the README's own run);
``pubmesh analyze`` of it with no warm Spark (embedded); ``pubmesh spark start`` and the time
until ``pubmesh spark status`` says warm; ``pubmesh analyze`` three times on the warm Spark,
then twice with ``--engine plan`` (the side-by-side reference: one Spark plan, as every
analysis ran before runs went to tasks);
``pubmesh spark stop``; ``pubmesh sweep paper004_failures`` (24 runs of 17 nodes) with the
seconds its simulations took (the sweep's ``tasks.json``). Prints each time in seconds and in
loop figures, beside its goals (warm ≤ 6, embedded ≤ 20, warm-up ≤ 13 loop figures; a
small sweep's Spark overhead ≤ its simulation time). A warm Spark already running is stopped
first; the one it starts is always stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def loop_figure() -> float:
    """CPU seconds of a bare loop of 10⁷ additions, median of five fresh processes."""
    code = "import time\nt=time.process_time()\ns=0\nfor i in range(10**7): s+=i\n"
    code += "print(time.process_time()-t)"
    runs = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        for _ in range(5)
    ]
    return statistics.median(runs)


def pubmesh(*args: str) -> tuple[float, str]:
    """Run ``pubmesh ARGS``; its wall seconds and output. Exits naming the command if it fails."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", *args], capture_output=True, text=True, env=ENV
    )
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1) or (done.returncode == 1 and args[:2] != ("spark", "status")):
        sys.exit(f"bench_readme_path: pubmesh {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="where the runs go (default: a temporary directory)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="readme-path-"))
    loop = loop_figure()
    times: dict[str, float] = {}
    pubmesh("spark", "stop")
    run = out / "g1000"
    times["sim"], _ = pubmesh("sim", "gossip_1000", "--seed", "3", "--quiet", "--force",
                              "--out", str(run))  # fmt: skip
    times["embedded"], _ = pubmesh("analyze", str(run), "--out", str(out / "embedded"))
    try:
        times["spark start"], _ = pubmesh("spark", "start")
        started = time.perf_counter()
        while ", warm)" not in pubmesh("spark", "status")[1]:
            if time.perf_counter() - started > 600:
                sys.exit("bench_readme_path: the warm Spark did not warm up in 10 minutes")
            time.sleep(1.0)
        times["warm-up"] = time.perf_counter() - started
        for call in (1, 2, 3):
            times[f"warm call {call}"], _ = pubmesh(
                "analyze", str(run), "--out", str(out / f"warm{call}")
            )
        # the side-by-side reference: the same run by one Spark plan (--engine plan, what
        # every analysis was before runs went to tasks), on the same warm server
        for call in (1, 2):
            times[f"warm plan {call}"], _ = pubmesh(
                "analyze", str(run), "--engine", "plan", "--out", str(out / f"plan{call}")
            )
    finally:
        pubmesh("spark", "stop")
    sweep = out / "sweep"
    times["sweep"], _ = pubmesh("sweep", "paper004_failures", "--out", str(sweep))
    tasks = json.loads((sweep / "tasks.json").read_text())
    simulating = sum(task["seconds"] for task in tasks)
    print(f"loop figure {loop:.3f} s (10**7 additions, median of 5)")
    for name, seconds in times.items():
        print(f"{name:<14} {seconds:7.1f} s  {seconds / loop:6.1f} loop figures")
    warm = min(times[f"warm call {c}"] for c in (2, 3))
    print(
        f"goals: warm {warm / loop:.1f} ≤ 6, embedded {times['embedded'] / loop:.1f}"
        f" ≤ 20, warm-up {times['warm-up'] / loop:.1f} ≤ 13 (with the start "
        f"{(times['spark start'] + times['warm-up']) / loop:.1f}); "
        f"sweep: {simulating:.1f} task-seconds simulating, Spark and the rest "
        f"{times['sweep'] - simulating:.1f} s"
    )
    plan = min(times["warm plan 1"], times["warm plan 2"])
    print(f"warm, tasks against the plan: {warm:.1f} s against {plan:.1f} s ({plan / warm:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
