"""Same scenario and seed, same trace, byte for byte — through the real CLI, for a gossip run
with latency jitter, loss, a crash, a partition and churn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """
[run]
stack = "gossip"
nodes = 200
seed = 11
duration = 40.0
start_spread = 5.0
[network]
latency = { dist = "lognormal", median = 0.02, sigma = 0.8 }
loss = 0.01
timer_jitter = 0.1
[workload]
topics = 4
topic_popularity = "zipf"
subscriptions_per_node = 2
publications = 60
publish_start = 15.0
publish_rate = 4.0
publisher = "any"
[[faults]]
at = 20.0
kind = "crash"
fraction = 0.2
[[faults]]
at = 25.0
kind = "partition"
fraction = 0.3
[[faults]]
at = 28.0
kind = "heal"
[[faults]]
at = 10.0
kind = "churn"
rate = 1.0
until = 30.0
[trace]
snapshot_interval = 10.0
"""


def sim(path: Path, out: Path, seed: int) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pubmesh",
            "sim",
            str(path),
            "--seed",
            str(seed),
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr


def parquet_files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*.parquet"))}


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "det.toml"
    path.write_text(SCENARIO)
    sim(path, tmp_path / "a", 11)
    sim(path, tmp_path / "b", 11)
    sim(path, tmp_path / "c", 12)
    a, b, c = (parquet_files(tmp_path / x) for x in "abc")
    assert len(a) >= 10
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], f"{name} differs; replay: pubmesh sim {path} --seed 11"
    assert a["messages/part-00000.parquet"] != c["messages/part-00000.parquet"]
