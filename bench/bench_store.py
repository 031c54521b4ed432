"""What a data directory costs per delivery: the CPU of recording deliveries in
``pubmesh.net.store`` (SQLite, WAL, ``synchronous = NORMAL``) by the number of deliveries one
commit carries (the runtime commits once per event-loop turn, for every delivery of that turn),
beside the same number of bare ``dict`` insertions as the reference.

    PYTHONPATH=src .venv/bin/python bench/bench_store.py [--deliveries 24000]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pubmesh.net.store import Store  # noqa: E402


def per_delivery(batch: int, total: int) -> tuple[float, float]:
    """CPU and wall microseconds per delivery record, ``batch`` records per commit."""
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "data")
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(total // batch):
            for _ in range(batch):
                store.delivered(rng.getrandbits(64), time.time())
            store.commit()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        store.close()
    n = total // batch * batch
    return cpu / n * 1e6, wall / n * 1e6


def reference(total: int) -> float:
    """CPU microseconds per bare dict insertion of a random id (the in-memory filter's work)."""
    rng = random.Random(1)
    seen: dict[int, float] = {}
    cpu = time.process_time()
    for _ in range(total):
        seen[rng.getrandbits(64)] = time.time()
    return (time.process_time() - cpu) / total * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=24000)
    args = parser.parse_args()
    base = reference(args.deliveries)
    print(f"{'deliveries per commit':>22} {'CPU us each':>12} {'wall us each':>13} {'x dict':>8}")
    for batch in (1, 8, 100):
        cpu, wall = per_delivery(batch, args.deliveries)
        print(f"{batch:>22} {cpu:>12.1f} {wall:>13.1f} {cpu / base:>8.0f}")
    print(f"reference: a dict insertion, {base:.2f} us CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
