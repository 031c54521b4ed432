"""Gossip's upkeep on a steady overlay: what a healthy swarm costs per node and second.

A warm overlay (``[init] overlay = "warm"``), one topic, every node subscribed, one publication at
10 s, 30 simulated seconds, message totals only (``[trace] messages = "counts"``), seed 1000003:
nothing needs repair, so every message but the one broadcast is upkeep (HyParView's shuffles,
the rooted tree's beacons, announces to the contact, refills). Prints messages per node per
second by type, the simulation's CPU, and CPU per node-second of simulated time with the loop
figure beside it (CPU seconds of a bare loop of 10**7 additions), so a user can predict what a
long simulation at scale costs.

``--against DIR`` runs the same scenario on the pubmesh of another checkout (its ``src``) in
the same process layout, alternating the two ``--repeat`` times, and prints both side by
side with the ratios: the reference is 37767d3, the code before the liveness fixes
(``git worktree add /tmp/old 37767d3``).

    .venv/bin/python bench/bench_upkeep.py [--nodes 20000] [--against /tmp/old] [--repeat 2]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.cpubudget import loop_figure  # noqa: E402
from support.upkeep import DURATION, upkeep_scenario  # noqa: E402

#: run in a child process on the given source tree: the simulation's own CPU, and the totals
CHILD = """
import json, sys, time
import pyarrow.parquet as pq
try:
    from pubmesh.scenario.model import load_scenario
except ImportError:  # a checkout from before the scenario had a home of its own (37767d3)
    from pubmesh.sim.scenario import load_scenario
from pubmesh.sim.runner import run_scenario
scenario = load_scenario(sys.argv[1])
started = time.process_time()
run_scenario(scenario, sys.argv[2])
cpu = time.process_time() - started
counts = pq.read_table(sys.argv[2] + "/message_counts").to_pandas()
by_type = counts.groupby("type")["sent"].sum().to_dict()
print(json.dumps({"cpu": cpu, "sent": {k: int(v) for k, v in by_type.items()}}))
"""


def run(source: Path, nodes: int, tmp: Path) -> dict[str, object]:
    scenario = tmp / f"upkeep-{nodes}.toml"
    scenario.write_text(upkeep_scenario(nodes))
    out = tmp / f"run-{source.parent.name}-{time.monotonic_ns()}"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(scenario), str(out)],
        env={**os.environ, "PYTHONPATH": str(source)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench_upkeep: the run on {source} failed:\n{done.stderr[-2000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20000, help="overlay size (20000)")
    parser.add_argument("--against", type=Path, help="another checkout to run side by side")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, alternated (2)")
    args = parser.parse_args()
    sources = {"this": ROOT / "src"}
    if args.against:
        sources["against"] = args.against.resolve() / "src"
    loop = loop_figure()
    results: dict[str, list[dict[str, object]]] = {name: [] for name in sources}
    with tempfile.TemporaryDirectory(prefix="pubmesh-upkeep-") as tmp:
        for _ in range(args.repeat):
            for name, source in sources.items():
                results[name].append(run(source, args.nodes, Path(tmp)))
    node_seconds = args.nodes * DURATION
    sent = {name: runs[0]["sent"] for name, runs in results.items()}
    cpus = {name: [float(r["cpu"]) for r in runs] for name, runs in results.items()}  # type: ignore[arg-type]
    types = sorted(
        {t for counts in sent.values() for t in counts}, key=lambda t: -sent["this"].get(t, 0)
    )  # type: ignore[union-attr]
    print(
        f"steady warm gossip overlay, {args.nodes:,} nodes, 30 s, seed 1000003; "
        f"loop figure {loop:.3f} s"
    )
    header = f"{'type':<18} {'this /node/s':>13}"
    if "against" in sources:
        header += f" {'against /node/s':>16} {'ratio':>6}"
    print(header)
    for name in [*types, "total"]:
        mine = sum(sent["this"].values()) if name == "total" else sent["this"].get(name, 0)  # type: ignore[union-attr]
        line = f"{name:<18} {mine / node_seconds:13.4f}"
        if "against" in sources:
            theirs = (
                sum(sent["against"].values()) if name == "total" else sent["against"].get(name, 0)
            )  # type: ignore[union-attr]
            ratio = f"{mine / theirs:6.2f}" if theirs else "   new" if mine else "     –"
            line += f" {theirs / node_seconds:16.4f} {ratio}"
        print(line)
    for name, values in cpus.items():
        per = statistics.median(values) / node_seconds * 1e6
        print(
            f"CPU ({name}): {', '.join(f'{v:.1f}' for v in values)} s; "
            f"{per:.1f} µs per node-second ({per / loop:.1f} µs ÷ loop figure s)"
        )
    if "against" in sources:
        ratio = statistics.median(cpus["this"]) / statistics.median(cpus["against"])
        print(f"CPU ratio this/against: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
