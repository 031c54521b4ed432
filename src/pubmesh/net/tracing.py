"""A node's partial trace, written in segments that survive the node being killed.

A node of a cluster (or any node given ``--trace-dir``) records what it alone knows in trace v1
form (:class:`pubmesh.trace.writer.TraceWriter`): its deliveries, the frames it sent and
received, its protocol's trace records and the runtime's rejections and drops, snapshots of its
overlay state, its own subscriptions and publications. Times are wall-clock seconds (the run's
start is unknown here) and node ids are network ids (``ip << 16 | port``); the cluster's
gatherer (:mod:`pubmesh.net.cluster.gather`) maps both onto the run.

A Parquet file is only readable once its footer is written, and a node may be SIGKILLed at any
moment. So the trace is cut into *segments*: every ``segment_seconds`` (default 5) the open
writer is closed (on a worker thread, off the event loop) into ``DIR/seg-NNNNNN.tmp`` and
renamed to ``DIR/seg-NNNNNN``; the gatherer reads complete segments only. Each node ends its
segments at its own phase of the period (from its id): sealing costs ~20 ms of CPU, and 32
nodes sealing at one instant on two cores held every publication in flight for a few hundred
milliseconds, every five seconds (the cluster's p99 latency tails). A segment is therefore
between a quarter and one and a quarter ``segment_seconds`` long, and a killed node loses at
most its last 1.25 × ``segment_seconds`` of rows (its deliveries do not count anyway: only
survivors are expected to deliver). A segment holds only the tables that got rows: writing the
ten tables of a trace, empty ones included, cost a node 14 ms per seal, the non-empty ones alone
2 ms (1,500 deliveries); the gatherer reads whichever tables a segment has.

Disk faults stay here. A write that fails (a full disk, a directory removed, an I/O error)
never reaches the network path: the segment being written is given up (its temporary files
removed), its rows and every row until the next segment boundary are dropped and counted, and
the owner hears of the first failure once (``on_error``: the node says so on stderr and in its
JSON lines); at the next boundary a new segment is tried, so the trace resumes when there is
room again. Segments already sealed stay. :attr:`PartialTrace.incomplete` says whether any row
was lost; the node reports it when it ends, and the cluster marks ``run.json`` from it.

Messages: the sender records a row per frame with ``t_recv`` null, the receiver a row with both
times (the send time travels in the frame header). The gatherer pairs them up: a sent frame
with no matching received row is a lost message.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pubmesh.private import private_dir
from pubmesh.proto.core import MESSAGE_INFO, Message, NodeId, SnapshotRow
from pubmesh.trace.writer import TraceWriter

SEGMENT_PREFIX = "seg-"


class PartialTrace:
    """Rows of one node; see the module docstring. Call :meth:`tick` now and then."""

    def __init__(
        self,
        directory: Path | str,
        node: NodeId,
        *,
        segment_seconds: float = 5.0,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        private_dir(self.directory)
        #: called (on the caller's thread, from a row method or :meth:`tick`) with one line the
        #: first time a write fails; later failures are counted, not reported again
        self.on_error = on_error
        #: the first write error, as reported; None while every write succeeded
        self.error: str | None = None
        #: rows given up: those of failed segments and those dropped until the next boundary
        self.rows_lost = 0
        #: segments sealed (renamed to their final name)
        self.sealed = 0
        #: while a write has failed: rows are dropped until this wall-clock time
        self._down_until: float | None = None
        #: errors of the sealing thread, taken up by :meth:`tick` on the owner's thread
        self._seal_failures: list[tuple[OSError, int]] = []
        self._lock = threading.Lock()
        self.node = node
        self.segment_seconds = segment_seconds
        self.run_id = f"partial-{node}"
        self._index = 0
        self._writer: TraceWriter | None = None
        self._rows = 0
        self._seal_at = 0.0
        #: where in the period this node's segments end (a fraction of segment_seconds, from
        #: the id: Knuth's multiplicative hash), so that a cluster's nodes seal at different
        #: moments instead of all at once
        self._phase = ((node * 2654435761) % (1 << 32)) / (1 << 32)
        self.closed = False
        self._sealer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pubmesh-trace")
        # pyarrow's first conversion imports pandas and its first Parquet write sets up the
        # codecs: half a second to a second of CPU. Pay it now, before the node says it is
        # ready, not in the middle of a run (where it would steal that CPU from the protocol,
        # and a node killed early would lose a segment still being written)
        _warm_up()

    @property
    def incomplete(self) -> bool:
        """Whether any row was lost to a write error."""
        return self.rows_lost > 0 or self.error is not None

    def _open(self, now: float) -> TraceWriter | None:
        """The segment to add a row to (opened if need be), or None while writes are down."""
        writer = self._writer
        if writer is None:
            if self._down_until is not None:
                if now < self._down_until:
                    self.rows_lost += 1
                    return None
                self._down_until = None
            path = self.directory / f"{SEGMENT_PREFIX}{self._index:06d}.tmp"
            try:
                writer = TraceWriter(path, self.run_id, messages_mode="full", empty_tables=False)
            except OSError as error:
                self._failed(error, now, rows=1)
                return None
            self._writer = writer
            self._seal_at = self._boundary_after(now + self.segment_seconds / 4)
        self._rows += 1
        return writer

    def _failed(self, error: OSError, now: float, rows: int) -> None:
        """A write failed: give up the open segment and drop rows until the next boundary."""
        writer, self._writer = self._writer, None
        self.rows_lost += rows + (self._rows if writer is not None else 0)
        self._rows = 0
        if writer is not None:
            self._index += 1
            _discard(writer)
        self._down_until = self._boundary_after(now)
        self._report(error)

    def _report(self, error: OSError) -> None:
        if self.error is not None:
            return
        where = error.filename or self.directory
        self.error = (
            f"trace writes to {where} fail ({error.strerror or error}): rows are dropped and"
            " counted, the segments written so far are kept, and writing resumes at the next"
            " segment when it can; the node keeps serving"
        )
        if self.on_error is not None:
            self.on_error(self.error)

    def _boundary_after(self, t: float) -> float:
        """The first end of a segment of this node after wall-clock time ``t``."""
        period = self.segment_seconds
        offset = self._phase * period
        return (math.floor((t - offset) / period) + 1) * period + offset

    def tick(self, now: float) -> None:
        """Close the open segment once its end has come; take up the sealing thread's errors."""
        if self._seal_failures:
            with self._lock:
                failures, self._seal_failures = self._seal_failures, []
            for error, rows in failures:
                self.rows_lost += rows
                self._report(error)
        if self._writer is not None and now >= self._seal_at:
            self._seal()

    def _seal(self) -> None:
        writer = self._writer
        if writer is None:
            return
        final = self.directory / f"{SEGMENT_PREFIX}{self._index:06d}"
        rows = self._rows
        self._writer = None
        self._index += 1
        self._rows = 0
        # writing Parquet takes milliseconds (the first time, with pyarrow's lazy set-up, a
        # good part of a second): not on the event loop, which must keep serving peers. One
        # worker thread seals segments in order; nothing else touches a writer once handed over
        self._sealer.submit(self._seal_segment, writer, final, rows)

    def _seal_segment(self, writer: TraceWriter, final: Path, rows: int) -> None:
        """On the sealing thread: write the segment out and give it its final name; on a write
        error, remove what was written and hand the error to the owner's thread."""
        try:
            writer.close()
            os.replace(writer.run_dir, final)
        except OSError as error:
            _discard(writer)
            with self._lock:
                self._seal_failures.append((error, rows))
        else:
            self.sealed += 1

    def close(self) -> None:
        if not self.closed:
            self._seal()
            self._sealer.shutdown(wait=True)
            self.tick(-math.inf)  # the last segment's error, if sealing it failed
            self.closed = True

    # ------------------------------------------------------------------ rows
    def _add(self, t: float, table: str, *row: Any) -> None:
        """Add a row to ``table`` of the open segment (TraceWriter's method of that name); a
        write error is contained here (module docstring, disk faults)."""
        writer = self._open(t)
        if writer is None:
            return
        try:
            getattr(writer, table)(*row)
        except OSError as error:
            self._failed(error, t, rows=0)

    def node_event(self, t: float, event: str, role: str) -> None:
        self._add(t, "node", self.node, t, event, role)

    def subscription(
        self, topic: str, t_start: float, t_end: float | None, filter: Mapping[str, Any] | None
    ) -> None:
        self._add(t_start, "subscription", self.node, topic, t_start, t_end, filter)

    def publication(
        self, pub_id: int, topic: str, t: float, size: int, attributes: Mapping[str, Any] | None
    ) -> None:
        self._add(t, "publication", pub_id, self.node, topic, t, size, attributes)

    def delivery(self, pub_id: int, t: float, hops: int) -> None:
        self._add(t, "delivery", pub_id, self.node, t, hops)

    def message(
        self,
        t_send: float,
        t_recv: float | None,
        src: NodeId,
        dst: NodeId,
        message: Message,
        size: int,
    ) -> None:
        info = MESSAGE_INFO[type(message)]
        self._add(
            t_send if t_recv is None else t_recv,
            "message",
            t_send,
            t_recv,
            src,
            dst,
            info.name,
            info.layer,
            info.payload,
            message.publication(),
            size,
        )

    def event(self, t: float, kind: str, detail: Mapping[str, Any]) -> None:
        self._add(t, "event", t, self.node, kind, detail)

    def snapshot(self, t: float, rows: Iterable[SnapshotRow]) -> None:
        for row in rows:
            self._add(
                t, "snapshot", t, self.node, row.topic, row.layer, list(row.neighbors), row.state
            )


def _warm_up() -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("x", pa.int64())])
    # from a list, as TraceWriter does (which imports pandas unless the node's finder stops it)
    column = pa.array([1], type=pa.int64())
    with pq.ParquetWriter(io.BytesIO(), schema, compression="zstd") as writer:
        writer.write_batch(pa.RecordBatch.from_arrays([column], schema=schema))


def _discard(writer: TraceWriter) -> None:
    """Give up a segment: close its files as far as they close, and remove its directory."""
    # the segment is lost anyway (closing it may fail as its rows did): its files must go
    with contextlib.suppress(Exception):
        writer.close()
    shutil.rmtree(writer.run_dir, ignore_errors=True)


def segments(directory: Path | str) -> list[Path]:
    """Complete segments of a node's partial trace, in order."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(SEGMENT_PREFIX) and not p.name.endswith(".tmp")
    )
