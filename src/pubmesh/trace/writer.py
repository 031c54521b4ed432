"""Buffered columnar trace writer, shared by the simulator and the TCP runtime.

Rows are appended as tuples (one list append per row, the cheapest thing Python does) and
turned into Arrow columns every ``buffer_rows`` rows, each flush one Parquet row group of
``RUN_DIR/<table>/part-00000.parquet``. Flushing at fixed row counts, with no timestamps and a
fixed writer configuration, is what makes the same run produce the same bytes.

``messages_mode = "counts"`` replaces the per-message table by per-node per-second counters
(``message_counts``) so that 10^6-node runs keep their message accounting in bounded memory.
Counters for seconds that lie ``COUNTS_HORIZON`` seconds behind the clock are flushed as the run
advances; a message received later than that for an old second lands in a second row with the
same key, and readers add rows up by key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pubmesh.trace.schema import SCHEMAS

PART_NAME = "part-00000.parquet"
COUNTS_HORIZON = 5


def to_json(value: Mapping[str, Any] | None) -> str | None:
    """JSON text with sorted keys (deterministic), or None."""
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return list(value)
    return str(value)


class TraceWriter:
    """Writes one run (``run_id``) into ``run_dir``. Use as a context manager or call close()."""

    def __init__(
        self,
        run_dir: Path | str,
        run_id: str,
        *,
        messages_mode: str = "full",
        buffer_rows: int = 65536,
        compression: str = "zstd",
        empty_tables: bool = True,
    ) -> None:
        if messages_mode not in ("full", "counts"):
            raise ValueError(f"messages_mode must be 'full' or 'counts', not {messages_mode!r}")
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.messages_mode = messages_mode
        self.buffer_rows = buffer_rows
        self.compression = compression
        #: whether close() writes the tables that got no row (a whole trace: yes, so readers
        #: find every table; a node's partial-trace segment: no, see pubmesh.net.tracing)
        self.empty_tables = empty_tables
        self._rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in SCHEMAS}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._counts: dict[tuple[int, int, tuple[str, str, bool]], list[int]] = {}
        self._counts_flushed_below = -1
        self.rows_written: dict[str, int] = dict.fromkeys(SCHEMAS, 0)
        self._closed = False
        self.run_dir.mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------- table appenders
    def run(
        self,
        *,
        stack: str,
        runtime: str,
        nodes: int,
        seed: int,
        scenario: str,
        duration: float,
        schema_version: int,
    ) -> None:
        self._append(
            "runs",
            (
                self.run_id,
                stack,
                runtime,
                nodes,
                seed,
                scenario,
                schema_version,
                duration,
                self.messages_mode,
            ),
        )

    def node(self, node: int, t: float, event: str, role: str) -> None:
        self._append("nodes", (self.run_id, node, t, event, role))

    def subscription(
        self,
        node: int,
        topic: str,
        t_start: float,
        t_end: float | None,
        filter: Mapping[str, Any] | None = None,
    ) -> None:
        self._append("subscriptions", (self.run_id, node, topic, to_json(filter), t_start, t_end))

    def publication(
        self,
        pub_id: int,
        publisher: int,
        topic: str,
        t: float,
        size: int,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self._append(
            "publications",
            (self.run_id, pub_id, publisher, topic, to_json(attributes), t, size),
        )

    def delivery(self, pub_id: int, node: int, t: float, hops: int) -> None:
        self._append("deliveries", (self.run_id, pub_id, node, t, hops))

    def message(
        self,
        t_send: float,
        t_recv: float | None,
        src: int,
        dst: int,
        type_name: str,
        layer: str,
        payload: bool,
        pub_id: int | None,
        size: int,
    ) -> None:
        if self.messages_mode == "full":
            rows = self._rows["messages"]
            rows.append(
                (self.run_id, t_send, t_recv, src, dst, type_name, layer, payload, pub_id, size)
            )
            if len(rows) >= self.buffer_rows:
                self._flush("messages")
            return
        self.count(t_send, t_recv, src, dst, (type_name, layer, payload), size)

    def count(
        self,
        t_send: float,
        t_recv: float | None,
        src: int,
        dst: int,
        kind: tuple[str, str, bool],
        size: int,
    ) -> None:
        """``messages_mode = "counts"``: count one message (``kind`` is its (type name, layer,
        payload) triple; the simulator passes one shared tuple per message class, so the
        counters are keyed by three small values, and the triple is spelt out at flush)."""
        # int() is floor for the non-negative times of a run, and cheaper than math.floor
        counts = self._counts
        key = (int(t_send), src, kind)
        sent = counts.get(key)
        if sent is None:
            sent = counts[key] = [0, 0, 0, 0]
        sent[0] += 1
        sent[3] += size
        if t_recv is None:
            sent[2] += 1
        else:
            key = (int(t_recv), dst, kind)
            received = counts.get(key)
            if received is None:
                received = counts[key] = [0, 0, 0, 0]
            received[1] += 1

    def snapshot(
        self,
        t: float,
        node: int,
        topic: str,
        layer: str,
        neighbors: list[int],
        state: Mapping[str, Any],
    ) -> None:
        self._append("snapshots", (self.run_id, t, node, topic, layer, neighbors, to_json(state)))

    def check(self, t: float, predicate: str, value: bool) -> None:
        self._append("checks", (self.run_id, t, predicate, value))

    def fault(self, t: float, kind: str, detail: Mapping[str, Any]) -> None:
        self._append("faults", (self.run_id, t, kind, to_json(detail)))

    def event(self, t: float, node: int, kind: str, detail: Mapping[str, Any]) -> None:
        self._append("events", (self.run_id, t, node, kind, to_json(detail)))

    # ---------------------------------------------------------------- flushing
    def advance(self, now: float) -> None:
        """Tell the writer the run's clock has reached ``now`` (flushes old message counters)."""
        if self.messages_mode != "counts":
            return
        horizon = math.floor(now) - COUNTS_HORIZON
        if horizon > self._counts_flushed_below:
            self._flush_counts(horizon)

    def _flush_counts(self, below: int | None) -> None:
        counts = self._counts
        # keys (second, node, (name, layer, payload)) sort as the flat rows do, and each is
        # popped with the key object itself (no second tuple built per counter)
        keys = sorted(counts) if below is None else sorted(k for k in counts if k[0] < below)
        rows = self._rows["message_counts"]
        append = rows.append
        pop = counts.pop
        run_id = self.run_id
        for key in keys:
            second, node, (name, layer, payload) = key
            sent, received, lost, size = pop(key)
            append((run_id, second, node, name, layer, payload, sent, received, lost, size))
        if below is not None:
            self._counts_flushed_below = below
        if len(rows) >= self.buffer_rows:
            self._flush("message_counts")

    def _append(self, table: str, row: tuple[Any, ...]) -> None:
        rows = self._rows[table]
        rows.append(row)
        if len(rows) >= self.buffer_rows:
            self._flush(table)

    def _flush(self, table: str) -> None:
        rows = self._rows[table]
        schema = SCHEMAS[table]
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
        batch = pa.RecordBatch.from_arrays(
            [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
            schema=schema,
        )
        writer = self._writers.get(table)
        if writer is None:
            directory = self.run_dir / table
            directory.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(
                directory / PART_NAME,
                schema,
                compression=self.compression,
                write_statistics=True,
                store_schema=True,
            )
            self._writers[table] = writer
        if batch.num_rows or self.rows_written[table] == 0:
            writer.write_batch(batch)
        self.rows_written[table] += batch.num_rows
        rows.clear()

    def close(self) -> None:
        """Flush everything and write every table (empty ones too, so readers find them, unless
        ``empty_tables`` is off)."""
        if self._closed:
            return
        if self.messages_mode == "counts":
            self._flush_counts(None)
        tables = [
            t
            for t in SCHEMAS
            if t != ("messages" if self.messages_mode == "counts" else "message_counts")
        ]
        for table in tables:
            if self._rows[table] or (table not in self._writers and self.empty_tables):
                self._flush(table)
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        self._closed = True

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
