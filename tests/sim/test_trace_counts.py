"""The counts-mode message counters of the trace writer (``messages_mode = "counts"``).

The writer keeps counted messages in typed arrays and adds them up with NumPy at each flush.
These tests hold it to the dictionary of counters it replaced, written out here as the oracle:
one counter per (second, node, (type name, layer, payload)), the seconds ``COUNTS_HORIZON``
behind the clock flushed as it advances, rows sorted by key, and a Parquet row group written
whenever ``buffer_rows`` rows are pending. Same rows in the same order and the same row groups
are what make a run's trace the same bytes as before.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pubmesh.trace.writer import COUNTS_HORIZON, TraceWriter

KINDS = [
    ("Gossip", "plumtree", True),
    ("Prune", "plumtree", False),
    ("IHave", "plumtree", False),
    ("Shuffle", "hyparview", False),
    ("Gossip", "hyparview", True),  # same name, other layer: ordered by the whole triple
    ("Gossip", "plumtree", False),
]


class OracleCounts:
    """The dictionary-of-counters writer the NumPy counters replaced."""

    def __init__(self, buffer_rows: int) -> None:
        self.counts: dict[tuple[int, int, tuple[str, str, bool]], list[int]] = {}
        self.flushed_below = -1
        self.pending: list[tuple[object, ...]] = []
        self.row_groups: list[int] = []
        self.rows: list[tuple[object, ...]] = []
        self.buffer_rows = buffer_rows

    def count(self, t_send, t_recv, src, dst, kind, size) -> None:  # type: ignore[no-untyped-def]
        sent = self.counts.setdefault((int(t_send), src, kind), [0, 0, 0, 0])
        sent[0] += 1
        sent[3] += size
        if t_recv is None:
            sent[2] += 1
        else:
            self.counts.setdefault((int(t_recv), dst, kind), [0, 0, 0, 0])[1] += 1

    def advance(self, now: float) -> None:
        horizon = math.floor(now) - COUNTS_HORIZON
        if horizon > self.flushed_below:
            self.flush(horizon)

    def flush(self, below: int | None) -> None:
        keys = sorted(k for k in self.counts if below is None or k[0] < below)
        for key in keys:
            second, node, (name, layer, payload) = key
            self.pending.append((second, node, name, layer, payload, *self.counts.pop(key)))
        if below is not None:
            self.flushed_below = below
        if len(self.pending) >= self.buffer_rows:
            self.write()

    def write(self) -> None:
        self.row_groups.append(len(self.pending))
        self.rows.extend(self.pending)
        self.pending = []

    def close(self) -> None:
        self.flush(None)
        if self.pending or not self.row_groups:
            self.write()


def messages(rng: random.Random, count: int, nodes: range, duration: float):  # type: ignore[no-untyped-def]
    """Messages in receive order: some lost, some received long after they were sent (a
    counter for a second already flushed comes back as a second row with the same key)."""
    out = []
    for _ in range(count):
        t_send = rng.uniform(0, duration)
        late = rng.random() < 0.05
        t_recv = None if rng.random() < 0.1 else t_send + rng.uniform(0, 12 if late else 0.2)
        src, dst = rng.choice(nodes), rng.choice(nodes)
        out.append((t_send, t_recv, src, dst, rng.choice(KINDS), rng.randrange(20, 3000)))
    out.sort(key=lambda m: m[0] if m[1] is None else m[1])
    return out


def written(path: Path) -> tuple[list[tuple[object, ...]], list[int]]:
    file = pq.ParquetFile(path / "message_counts" / "part-00000.parquet")
    table = file.read()
    assert table.column("run_id").to_pylist() == ["r"] * table.num_rows
    names = ["second", "node", "type", "layer", "payload", "sent", "received", "lost"]
    columns = [table.column(n).to_pylist() for n in [*names, "bytes_sent"]]
    groups = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
    return list(zip(*columns, strict=True)), groups


@pytest.mark.parametrize(
    ("seed", "nodes"),
    [
        (1, range(0, 50)),
        (2, range(0, 400)),
        (3, range(0, 7)),
        # ids the packed key cannot hold: the three-key sort takes over
        (4, range(2**32 - 20, 2**32 + 20)),
        (5, range(-30, 30)),
    ],
)
def test_counts_are_the_dictionary_counters_row_for_row(tmp_path: Path, seed: int, nodes: range):
    rng = random.Random(seed)
    buffer_rows = rng.choice([7, 64, 500])
    writer = TraceWriter(tmp_path, "r", messages_mode="counts", buffer_rows=buffer_rows)
    oracle = OracleCounts(buffer_rows)
    ids = {kind: writer.kind_id(kind) for kind in rng.sample(KINDS, len(KINDS))}
    for t_send, t_recv, src, dst, kind, size in messages(rng, 3000, nodes, 40.0):
        writer.count(t_send, t_recv, src, dst, ids[kind], size)
        oracle.count(t_send, t_recv, src, dst, kind, size)
        if rng.random() < 0.02:
            now = t_send if t_recv is None else t_recv
            writer.advance(now)
            oracle.advance(now)
    writer.close()
    oracle.close()
    rows, groups = written(tmp_path)
    assert len(rows) > 100, f"seed {seed}: too few counters to test anything"
    assert rows == oracle.rows, f"seed {seed}: rows differ from the dictionary counters"
    assert groups == oracle.row_groups, f"seed {seed}: row groups {groups} != {oracle.row_groups}"
    assert len(groups) > 1 or buffer_rows == 500, f"seed {seed}: the test never flushed"


def test_message_rows_in_counts_mode_take_the_triple(tmp_path: Path):
    """``message()`` (the simulator's lost-message path) counts under the same key as
    ``count()`` with the triple's id; lost and received add up in one row."""
    writer = TraceWriter(tmp_path, "r", messages_mode="counts")
    kind = writer.kind_id(("Ping", "probe", False))
    writer.count(1.5, 1.6, 3, 4, kind, 10)
    writer.message(1.2, None, 3, 5, "Ping", "probe", False, None, 30)
    writer.close()
    rows, groups = written(tmp_path)
    assert rows == [
        (1, 3, "Ping", "probe", False, 2, 0, 1, 40),
        (1, 4, "Ping", "probe", False, 0, 1, 0, 0),
    ]
    assert groups == [2]


def test_an_empty_counts_trace_has_its_table(tmp_path: Path):
    TraceWriter(tmp_path, "r", messages_mode="counts").close()
    rows, groups = written(tmp_path)
    assert rows == [] and groups == [0]


def test_a_flush_that_fills_the_buffer_exactly_writes_a_row_group(tmp_path: Path):
    writer = TraceWriter(tmp_path, "r", messages_mode="counts", buffer_rows=2)
    kind = writer.kind_id(("Ping", "probe", False))
    writer.count(0.5, 0.7, 1, 2, kind, 10)  # two counters in second 0
    writer.advance(COUNTS_HORIZON + 1.0)  # flushes second 0: exactly buffer_rows rows
    writer.count(9.5, 9.7, 1, 1, kind, 10)  # one counter in second 9
    writer.close()
    rows, groups = written(tmp_path)
    assert groups == [2, 1]
    assert [row[:2] for row in rows] == [(0, 1), (0, 2), (9, 1)]
