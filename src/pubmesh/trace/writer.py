"""Buffered columnar trace writer, shared by the simulator and the TCP runtime.

Rows are appended as tuples (one list append per row, the cheapest thing Python does) and
turned into Arrow columns every ``buffer_rows`` rows, each flush one Parquet row group of
``RUN_DIR/<table>/part-00000.parquet``. Flushing at fixed row counts, with no timestamps and a
fixed writer configuration, is what makes the same run produce the same bytes.

``messages_mode = "counts"`` replaces the per-message table by per-node per-second counters
(``message_counts``) so that 10^6-node runs keep their message accounting in bounded memory.
Counters for seconds that lie ``COUNTS_HORIZON`` seconds behind the clock are flushed as the run
advances; a message received later than that for an old second lands in a second row with the
same key, and readers add rows up by key. Until a flush, a counted message is seven numbers
in typed arrays (its send time, sender, kind and size; its receive time, receiver and kind),
56 bytes, where a dictionary of counters cost ~200 bytes per counter and two look-ups per
message; a flush adds them up with NumPy (see :class:`_MessageCounter`).
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pubmesh.private import private_dir, private_file
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
        self._counter = _MessageCounter()
        #: message_counts rows made by flushes of the counter, not yet written (column chunks)
        self._count_chunks: list[dict[str, Any]] = []
        self._count_rows = 0
        self._counts_flushed_below = -1
        self.rows_written: dict[str, int] = dict.fromkeys(SCHEMAS, 0)
        self._closed = False
        private_dir(self.run_dir)

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
        self.count(t_send, t_recv, src, dst, self.kind_id((type_name, layer, payload)), size)

    def kind_id(self, kind: tuple[str, str, bool]) -> int:
        """The number :meth:`count` takes for a message kind, its (type name, layer, payload)
        triple (the simulator looks one up per message class, once per run)."""
        return self._counter.kind_id(kind)

    def count(
        self,
        t_send: float,
        t_recv: float | None,
        src: int,
        dst: int,
        kind: int,
        size: int,
    ) -> None:
        """``messages_mode = "counts"``: count one message of kind ``kind`` (a
        :meth:`kind_id`) sent at ``t_send`` by ``src`` and received at ``t_recv`` by ``dst``,
        or lost (``t_recv`` None). Appends to typed arrays; the counters are made at flush."""
        c = self._counter
        c.sent_t.append(t_send)
        c.sent_node.append(src)
        c.sent_kind.append(kind)
        c.sent_size.append(size)
        if t_recv is None:
            c.lost_t.append(t_send)
            c.lost_node.append(src)
            c.lost_kind.append(kind)
        else:
            c.recv_t.append(t_recv)
            c.recv_node.append(dst)
            c.recv_kind.append(kind)

    def count_appends(self) -> tuple[Callable[[Any], None], ...]:
        """The appends :meth:`count` makes for a received message, bound, for a caller's hot
        loop: (send time, sender, kind, size, receive time, receiver, kind). They are valid
        until the next flush of the counters (:meth:`advance`, :meth:`close`), which replaces
        the arrays; fetch them again after it."""
        c = self._counter
        return (
            c.sent_t.append,
            c.sent_node.append,
            c.sent_kind.append,
            c.sent_size.append,
            c.recv_t.append,
            c.recv_node.append,
            c.recv_kind.append,
        )

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
        chunk = self._counter.flush(below)
        if below is not None:
            self._counts_flushed_below = below
        if chunk is not None:
            self._count_chunks.append(chunk)
            self._count_rows += len(chunk["second"])
        if self._count_rows >= self.buffer_rows:
            self._flush("message_counts")

    def _append(self, table: str, row: tuple[Any, ...]) -> None:
        rows = self._rows[table]
        rows.append(row)
        if len(rows) >= self.buffer_rows:
            self._flush(table)

    def _flush(self, table: str) -> None:
        rows = self._rows[table]
        schema = SCHEMAS[table]
        if table == "message_counts":
            batch = self._counts_batch()
        else:
            columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
            batch = pa.RecordBatch.from_arrays(
                [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
                schema=schema,
            )
        writer = self._writers.get(table)
        if writer is None:
            directory = self.run_dir / table
            private_dir(directory)
            writer = pq.ParquetWriter(
                directory / PART_NAME,
                schema,
                compression=self.compression,
                write_statistics=True,
                store_schema=True,
            )
            private_file(directory / PART_NAME)
            self._writers[table] = writer
        if batch.num_rows or self.rows_written[table] == 0:
            writer.write_batch(batch)
        self.rows_written[table] += batch.num_rows
        rows.clear()

    def _counts_batch(self) -> pa.RecordBatch:
        """The pending message_counts rows as one batch (and none pending after)."""
        chunks, self._count_chunks, self._count_rows = self._count_chunks, [], 0
        columns = {
            name: np.concatenate([c[name] for c in chunks]) if chunks else np.zeros(0, np.int64)
            for name in ("second", "node", "kind", "sent", "received", "lost", "bytes_sent")
        }
        kinds = self._counter.kinds
        kind = pa.array(columns["kind"])
        n = len(kind)
        schema = SCHEMAS["message_counts"]
        return pa.RecordBatch.from_arrays(
            [
                pa.array([self.run_id], pa.string()).take(np.zeros(n, np.int64)),
                pa.array(columns["second"], pa.int64()),
                pa.array(columns["node"], pa.int64()),
                pa.array([k[0] for k in kinds], pa.string()).take(kind),
                pa.array([k[1] for k in kinds], pa.string()).take(kind),
                pa.array([k[2] for k in kinds], pa.bool_()).take(kind),
                pa.array(columns["sent"], pa.int64()),
                pa.array(columns["received"], pa.int64()),
                pa.array(columns["lost"], pa.int64()),
                pa.array(columns["bytes_sent"], pa.int64()),
            ],
            schema=schema,
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has written the trace."""
        return self._closed

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
            pending = self._count_rows if table == "message_counts" else len(self._rows[table])
            if pending or (table not in self._writers and self.empty_tables):
                self._flush(table)
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        self._closed = True

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_DTYPES = {"d": np.float64, "q": np.int64}
#: the packed counter key: second << 40 | node << 8 | kind rank, while every part fits
_NODE_BITS, _KIND_BITS, _SECOND_LIMIT = 32, 8, 1 << 23


class _MessageCounter:
    """The counts-mode message counters, kept as the messages themselves until a flush.

    Each counted message is appended to typed arrays, the cheapest thing that keeps it: the
    send side (time, sender, kind, size), the receive side (time, receiver, kind) or, for a
    lost message, a lost entry (its send time, sender, kind). :meth:`flush` adds up the entries
    of the seconds below a bound with NumPy: one counter per (second, node, kind), ordered by
    second, node and the kind's (type name, layer, payload) triple, which are the rows a
    dictionary of counters keyed by those triples gave (same values, same order, so the same
    bytes). Times are non-negative, so their floor is ``int()``'s truncation."""

    __slots__ = (
        "_held",
        "_ids",
        "kinds",
        "lost_kind",
        "lost_node",
        "lost_t",
        "recv_kind",
        "recv_node",
        "recv_t",
        "sent_kind",
        "sent_node",
        "sent_size",
        "sent_t",
    )

    def __init__(self) -> None:
        #: kind triples by id, and ids by triple
        self.kinds: list[tuple[str, str, bool]] = []
        self._ids: dict[tuple[str, str, bool], int] = {}
        #: per side (by its time array's name): segments of entries not yet flushed, each
        #: (lowest second, highest second, [second, *the other columns])
        self._held: dict[str, list[tuple[int, int, list[np.ndarray]]]] = {}
        self.sent_t, self.sent_node = array("d"), array("q")
        self.sent_kind, self.sent_size = array("q"), array("q")
        self.recv_t, self.recv_node, self.recv_kind = array("d"), array("q"), array("q")
        self.lost_t, self.lost_node, self.lost_kind = array("d"), array("q"), array("q")

    def kind_id(self, kind: tuple[str, str, bool]) -> int:
        found = self._ids.get(kind)
        if found is None:
            found = self._ids[kind] = len(self.kinds)
            self.kinds.append(kind)
        return found

    def _split(self, names: tuple[str, ...], below: int | None) -> list[np.ndarray]:
        """Take the entries of the seconds below ``below`` (all if None) out of the side whose
        parallel typed arrays are ``names`` (the first holds the times): [second, *the others].

        What the typed arrays hold since the last flush becomes a held segment first, its
        seconds computed once; a segment all below the bound is taken whole, one all at or
        above it is kept whole, and only one that straddles it is split. So a flush costs the
        entries it takes, not every entry still held (a message's counters are flushed some
        ``COUNTS_HORIZON`` seconds after it is counted)."""
        held = self._held.setdefault(names[0], [])
        if len(getattr(self, names[0])):
            columns = []
            for name in names:
                values = getattr(self, name)
                columns.append(np.frombuffer(values, _DTYPES[values.typecode]))
                setattr(self, name, array(values.typecode))  # the view keeps the old one
            columns[0] = np.floor(columns[0]).astype(np.int64)
            held.append((int(columns[0].min()), int(columns[0].max()), columns))
        taken: list[list[np.ndarray]] = []
        kept: list[tuple[int, int, list[np.ndarray]]] = []
        for low, high, columns in held:
            if below is None or high < below:
                taken.append(columns)
            elif low >= below:
                kept.append((low, high, columns))
            else:
                inside = columns[0] < below
                taken.append([column[inside] for column in columns])
                rest = [column[~inside] for column in columns]
                kept.append((int(rest[0].min()), int(rest[0].max()), rest))
        self._held[names[0]] = kept
        if not taken:
            return [np.zeros(0, np.int64) for _ in names]
        return [np.concatenate([columns[i] for columns in taken]) for i in range(len(names))]

    def flush(self, below: int | None) -> dict[str, np.ndarray] | None:
        """The counters of the seconds below ``below`` (all if None), as column arrays in row
        order, or None if no message was counted in them."""
        sides = [
            self._split(("sent_t", "sent_node", "sent_kind", "sent_size"), below),
            self._split(("recv_t", "recv_node", "recv_kind"), below),
            self._split(("lost_t", "lost_node", "lost_kind"), below),
        ]
        lengths = [len(side[0]) for side in sides]
        if not sum(lengths):
            return None
        by_rank = np.array(sorted(range(len(self.kinds)), key=self.kinds.__getitem__), np.int64)
        rank_of = np.empty(len(by_rank), np.int64)
        rank_of[by_rank] = np.arange(len(by_rank))
        sizes = sides[0][3]
        fits = len(by_rank) <= 1 << _KIND_BITS and all(
            int(second.max()) < _SECOND_LIMIT
            and int(node.min()) >= 0
            and int(node.max()) < 1 << _NODE_BITS
            for second, node, *_ in sides
            if len(second)
        )
        if fits:
            shift = _NODE_BITS + _KIND_BITS
            packed = np.concatenate(
                [
                    (second << shift) | (node << _KIND_BITS) | rank_of[kind]
                    for second, node, kind, *_ in sides
                ]
            )
            del sides
            keys, inverse = np.unique(packed, return_inverse=True)
            del packed
            u_second = keys >> shift
            u_node = (keys >> _KIND_BITS) & ((1 << _NODE_BITS) - 1)
            u_rank = keys & ((1 << _KIND_BITS) - 1)
        else:  # node ids or seconds beyond the packed key: group by a three-key sort
            second = np.concatenate([side[0] for side in sides])
            node = np.concatenate([side[1] for side in sides])
            rank = rank_of[np.concatenate([side[2] for side in sides])]
            del sides
            order = np.lexsort((rank, node, second))
            o_second, o_node, o_rank = second[order], node[order], rank[order]
            first = np.ones(len(order), bool)
            first[1:] = (
                (o_second[1:] != o_second[:-1])
                | (o_node[1:] != o_node[:-1])
                | (o_rank[1:] != o_rank[:-1])
            )
            inverse = np.empty(len(order), np.int64)
            inverse[order] = np.cumsum(first) - 1
            u_second, u_node, u_rank = o_second[first], o_node[first], o_rank[first]
        groups = len(u_second)
        sent_end, recv_end = lengths[0], lengths[0] + lengths[1]
        sent_in = inverse[:sent_end]
        if int(sizes.sum()) < 1 << 53:  # float sums below 2^53 are exact
            sent_bytes = np.rint(np.bincount(sent_in, sizes, groups)).astype(np.int64)
        else:
            sent_bytes = np.zeros(groups, np.int64)
            np.add.at(sent_bytes, sent_in, sizes)
        received = np.bincount(inverse[sent_end:recv_end], minlength=groups)
        return {
            "second": u_second,
            "node": u_node,
            "kind": by_rank[u_rank],
            "sent": np.bincount(sent_in, minlength=groups).astype(np.int64),
            "received": received.astype(np.int64),
            "lost": np.bincount(inverse[recv_end:], minlength=groups).astype(np.int64),
            "bytes_sent": sent_bytes,
        }
