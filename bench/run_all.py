"""`make bench`: every benchmark of the project, one after the other (figures for
BENCHMARKS.md). A benchmark of a component this build does not have is named, not hidden."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    "bench_sim.py",
    "bench_analysis.py",
    "bench_analysis_floor.py",
    "bench_analysis_scale.py",
    "bench_analyze_warm.py",
    "bench_readme_path.py",
    "bench_skipring.py",
    "bench_net.py",
    "bench_hop.py",
    "bench_chord.py",
    "bench_chord_tables.py",
    "bench_chord_scaling.py",
    "bench_chord_q.py",
    "bench_chord_joins.py",
    "bench_brokertree.py",
    "bench_relay.py",
    "bench_gossip_load.py",
    "bench_gossip_trees.py",
    "bench_swarms.py",
    "bench_upkeep.py",
    "bench_insiders.py",
    "bench_insiders_net.py",
    "bench_store.py",
    "bench_history.py",
]


def main() -> int:
    failed = []
    for name in BENCHES:
        path = HERE / name
        print(f"\n=== {name} ===", flush=True)
        if not path.exists():
            # the benchmark of a component this build does not have yet (see BENCHMARKS.md)
            print(f"{name}: not present in this build")
            continue
        if subprocess.run([sys.executable, str(path), *sys.argv[1:]]).returncode != 0:
            failed.append(name)
    if failed:
        print(f"\nbenchmarks that did not complete: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
