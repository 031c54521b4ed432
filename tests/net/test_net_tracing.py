"""A node's partial trace: segments end at each node's own phase of the period, and a node
process writes its trace without loading pandas (for shorter latency tails and start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq

from pubmesh.net.address import node_id
from pubmesh.net.tracing import PartialTrace, segments
from pubmesh.trace.schema import SCHEMAS
from pubmesh.trace.writer import TraceWriter

ROOT = Path(__file__).resolve().parents[2]


def test_segments_end_at_each_nodes_own_phase(tmp_path: Path) -> None:
    """32 nodes of a loopback cluster (consecutive ports) end their segments spread over the
    period, not at one instant; every segment lasts between 1/4 and 5/4 of the period."""
    period = 5.0
    starts = (1000.0, 1003.7, 1012.25)
    ends = []
    for port in range(40000, 40032):
        trace = PartialTrace(
            tmp_path / str(port), node_id("127.0.0.1", port), segment_seconds=period
        )
        node_ends = [trace._boundary_after(start + period / 4) for start in starts]
        trace.close()
        for start, end in zip(starts, node_ends, strict=True):
            assert start + period / 4 < end <= start + period * 5 / 4, (port, start, end)
        for end in node_ends[1:]:  # one node's ends are whole periods apart
            periods = (end - node_ends[0]) / period
            assert abs(periods - round(periods)) < 1e-9, (port, node_ends)
        ends.append(node_ends[0])
    phases = {int((end % period) / period * 10) for end in ends}
    # 32 nodes over ten slots of half a second each: every slot has one (all at one instant
    # before the phase: a single slot)
    assert len(phases) == 10, sorted(phases)


def test_a_segment_is_sealed_once_its_end_has_come(tmp_path: Path) -> None:
    trace = PartialTrace(tmp_path, node_id("127.0.0.1", 40123), segment_seconds=2.0)
    trace.delivery(7, 100.0, 3)
    end = trace._seal_at
    trace.tick(end - 0.01)
    trace.delivery(8, end - 0.01, 2)
    trace.tick(end)
    trace.delivery(9, end + 0.1, 1)
    trace.close()
    sealed = segments(tmp_path)
    assert len(sealed) == 2
    first = pq.read_table(sealed[0] / "deliveries").column("pub_id").to_pylist()
    second = pq.read_table(sealed[1] / "deliveries").column("pub_id").to_pylist()
    assert (first, second) == ([7, 8], [9])


def test_a_segment_holds_only_the_tables_that_got_rows(tmp_path: Path) -> None:
    """Writing a trace's empty tables made sealing 7x dearer (14 ms against 2 ms for a
    segment of 1,500 deliveries); a segment has the tables with rows, and a whole trace (the
    writer's default) still has every table."""
    trace = PartialTrace(tmp_path / "partial", node_id("127.0.0.1", 40123), segment_seconds=2.0)
    for i in range(1500):
        trace.delivery(i, 100.0 + i / 1000, 2)
    trace.event(100.5, "net.test", {"peer": 3})
    trace.close()
    (segment,) = segments(tmp_path / "partial")
    assert sorted(p.name for p in segment.iterdir()) == ["deliveries", "events"]
    assert pq.read_table(segment / "deliveries").num_rows == 1500
    with TraceWriter(tmp_path / "whole", "r") as writer:
        writer.delivery(1, 2, 3.0, 1)
    assert sorted(p.name for p in (tmp_path / "whole").iterdir()) == sorted(
        t for t in SCHEMAS if t != "message_counts"
    )


def test_a_node_process_writes_its_trace_without_pandas(tmp_path: Path) -> None:
    """The node process's import finder keeps pandas out of node processes (pyarrow imported it on
    its first conversion from a list); the trace is written and reads back the same."""
    script = textwrap.dedent(
        f"""
        import json, sys
        from pubmesh.net.node.process import _NoPandas
        sys.meta_path.insert(0, _NoPandas)
        from pubmesh.net.tracing import PartialTrace
        trace = PartialTrace({str(tmp_path)!r}, 5, segment_seconds=1.0)
        for i in range(100):
            trace.delivery(i, 10.0 + i / 1000, 2)
        trace.event(10.5, "net.test", {{"peer": 3}})
        trace.close()
        try:
            import pandas  # noqa: F401
            blocked = False
        except ImportError:
            blocked = True
        print(json.dumps({{"pandas_loaded": "pandas" in sys.modules, "blocked": blocked}}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"pandas_loaded": False, "blocked": True}
    (segment,) = segments(tmp_path)
    deliveries = pq.read_table(segment / "deliveries").to_pylist()
    assert [row["pub_id"] for row in deliveries] == list(range(100))
    assert pq.read_table(segment / "events").column("kind").to_pylist() == ["net.test"]
