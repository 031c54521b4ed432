"""`pubmesh demo` (the job behind `make demo`) runs end to end and prints papers/004's tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pubmesh.sim.demo import summarize


def test_demo_quick_prints_the_papers_tables(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pubmesh", "demo", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for word in (
        "no failures",
        "10% failed",
        "50% failed",
        "85% failed",
        "reliability",
        "eager",
        "lazy",
        "membership",
    ):
        assert word in result.stdout, result.stdout
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert runs == ["paper004-s1", "paper004_fail10-s1", "paper004_fail50-s1", "paper004_fail85-s1"]
    # the table's figures are the trace's: without failures every expected delivery happens,
    # and the eager and lazy counts are the Gossip and IHave rows of the messages table
    expected, received, eager, lazy, membership, latencies, ldh = summarize(
        tmp_path / "runs" / "paper004-s1"
    )
    assert expected > 0 and received == expected
    assert eager > 0 and lazy > 0 and membership > 0
    # a publisher that subscribes delivers its own publication at once (hop 0, latency 0)
    assert len(latencies) == received and all(x >= 0 for x in latencies)
    assert sum(1 for x in latencies if x > 0) > received // 2
    assert ldh and max(ldh) >= 1
    assert f"{expected:,}" in result.stdout and f"{eager:,}" in result.stdout
