"""Benchmark: `pubmesh analyze` as a user calls it, with and without the warm Spark.

The 200-node gossip run of ``scenarios/gossip_crash.toml`` is simulated once (`pubmesh sim`,
the same-run reference), then analysed by the real command in fresh processes:

* **embedded**: no warm Spark (a private, empty state directory), twice: every call starts
  its own JVM;
* **warm**: `pubmesh spark start` once, its warm-up (one analysis of a small run of its own)
  awaited, then ``--calls`` analyses on the server it keeps;
* **20 runs in one job**: seeds 1..``--runs`` of the same scenario analysed by one
  `pubmesh analyze` call on the warm server, and the time per run.

Every time is the wall time of the whole command, from a fresh shell's point of view
(interpreter start and imports included). The warm server is stopped at the end.

    .venv/bin/python bench/bench_analyze_warm.py                   # 5 warm calls, 20 runs
    .venv/bin/python bench/bench_analyze_warm.py --calls 3 --runs 0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "gossip_crash.toml"


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", *command], capture_output=True, text=True, env=env,
        cwd=ROOT, check=False,
    )  # fmt: skip
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-800:]}")
    return took, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="analyses on the warm Spark")
    parser.add_argument("--runs", type=int, default=20, help="runs of the one-job figure")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    figures: dict[str, object] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp:
        base = Path(tmp)
        env = {**os.environ, "PUBMESH_SPARK_STATE": str(base / "state")}
        run = base / "run"
        figures["sim_s"], _ = timed(["sim", str(SCENARIO), "--quiet", "--out", str(run)], env)
        print(f"pubmesh sim (reference): {figures['sim_s']:.1f} s", flush=True)
        embedded = []
        for call in range(2):
            took, _ = timed(["analyze", str(run), "--out", str(base / f"e{call}")], env)
            embedded.append(took)
            print(f"embedded analyze #{call + 1}: {took:.1f} s", flush=True)
        figures["embedded_s"] = embedded
        figures["start_s"], _ = timed(["spark", "start"], env)
        print(f"pubmesh spark start: {figures['start_s']:.1f} s", flush=True)
        try:
            # the server warms itself up in the background; a user who analyses at once shares
            # the cores with it: the figures here are after it (status says "warm")
            began = time.perf_counter()
            while "warming up" in timed(["spark", "status"], env)[1]:
                time.sleep(0.5)
            figures["warm_up_s"] = time.perf_counter() - began
            print(f"warm-up after start: {figures['warm_up_s']:.1f} s", flush=True)
            warm = []
            for call in range(args.calls):
                took, out = timed(["analyze", str(run), "--out", str(base / f"w{call}")], env)
                assert "on Spark Connect" in out, out
                warm.append(took)
                print(f"warm analyze #{call + 1}: {took:.1f} s", flush=True)
            figures["warm_s"] = warm
            if args.runs:
                runs = [base / f"seed{seed}" for seed in range(1, args.runs + 1)]

                def simulate(path: Path) -> None:
                    seed = path.name.removeprefix("seed")
                    command = ["sim", str(SCENARIO), "--quiet", "--seed", seed, "--out", str(path)]
                    timed(command, env)

                with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
                    list(pool.map(simulate, runs))
                took, _ = timed(["analyze", *map(str, runs), "--out", str(base / "many")], env)
                figures["many_runs"] = args.runs
                figures["many_s"] = took
                print(
                    f"warm analyze of {args.runs} runs in one job: {took:.1f} s, "
                    f"{took / args.runs:.2f} s a run",
                    flush=True,
                )
        finally:
            timed(["spark", "stop"], env)
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
