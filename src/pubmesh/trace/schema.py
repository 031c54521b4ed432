"""Trace v1: the one schema both runtimes write and the analysis reads.

A *run directory* holds ``run.json`` (wall-clock facts about the run, not part of the
deterministic trace) and one Parquet dataset per table: ``RUN_DIR/<table>/part-00000.parquet``
(more parts as the writer flushes row groups into the same file; a sweep writes many runs into
one dataset partitioned by ``run_id``).

Times are float seconds from the start of the run. Node ids are int64. Topics are strings.
Columns typed JSON hold UTF-8 JSON text with sorted keys.

Tables (trace v1, minimum from the foundation issue plus the extensions marked +):

==============  ===========================================================================
runs            run_id, stack, runtime ("sim"/"net"), nodes, seed, scenario (TOML text),
                schema_version, + duration (observation window end, seconds),
                + messages_mode ("full"/"counts")
nodes           run_id, node, t, event ("up"/"crash"/"leave"/"recover"), role
subscriptions   run_id, node, topic, filter (JSON or null), t_start, t_end (null = still on)
publications    run_id, pub_id, publisher, topic, attributes (JSON or null), t, size
deliveries      run_id, pub_id, node, t, hops
messages        run_id, t_send, t_recv (null = lost), src, dst, type, layer, payload (bool),
                pub_id (nullable), bytes                       -- messages_mode = "full"
message_counts  + run_id, second, node, type, layer, payload, sent, received, lost,
                bytes_sent                                     -- messages_mode = "counts":
                per node per whole second of send time (received: per second of receipt)
snapshots       run_id, t, node, topic, layer, neighbors (list<int64>), state (JSON)
checks          + run_id, t, predicate, value: a stack's legitimacy predicate evaluated at
                every snapshot (convergence_time is computed from it)
faults          + run_id, t, kind, detail (JSON): every fault the scenario injected
events          + run_id, t, node, kind, detail (JSON): TraceRecord outputs of protocols and
                runtime events (rejected frames, dropped sends, ...)
==============  ===========================================================================

Migration notes: v1 is the first version. A reader refuses a trace whose schema_version is
newer than :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

_id = pa.int64()
_t = pa.float64()

SCHEMAS: dict[str, pa.Schema] = {
    "runs": pa.schema(
        [
            ("run_id", pa.string()),
            ("stack", pa.string()),
            ("runtime", pa.string()),
            ("nodes", pa.int64()),
            ("seed", pa.int64()),
            ("scenario", pa.string()),
            ("schema_version", pa.int32()),
            ("duration", _t),
            ("messages_mode", pa.string()),
        ]
    ),
    "nodes": pa.schema(
        [
            ("run_id", pa.string()),
            ("node", _id),
            ("t", _t),
            ("event", pa.string()),
            ("role", pa.string()),
        ]
    ),
    "subscriptions": pa.schema(
        [
            ("run_id", pa.string()),
            ("node", _id),
            ("topic", pa.string()),
            ("filter", pa.string()),
            ("t_start", _t),
            ("t_end", _t),
        ]
    ),
    "publications": pa.schema(
        [
            ("run_id", pa.string()),
            ("pub_id", _id),
            ("publisher", _id),
            ("topic", pa.string()),
            ("attributes", pa.string()),
            ("t", _t),
            ("size", pa.int64()),
        ]
    ),
    "deliveries": pa.schema(
        [
            ("run_id", pa.string()),
            ("pub_id", _id),
            ("node", _id),
            ("t", _t),
            ("hops", pa.int32()),
        ]
    ),
    "messages": pa.schema(
        [
            ("run_id", pa.string()),
            ("t_send", _t),
            ("t_recv", _t),
            ("src", _id),
            ("dst", _id),
            ("type", pa.string()),
            ("layer", pa.string()),
            ("payload", pa.bool_()),
            ("pub_id", _id),
            ("bytes", pa.int32()),
        ]
    ),
    "message_counts": pa.schema(
        [
            ("run_id", pa.string()),
            ("second", pa.int64()),
            ("node", _id),
            ("type", pa.string()),
            ("layer", pa.string()),
            ("payload", pa.bool_()),
            ("sent", pa.int64()),
            ("received", pa.int64()),
            ("lost", pa.int64()),
            ("bytes_sent", pa.int64()),
        ]
    ),
    "snapshots": pa.schema(
        [
            ("run_id", pa.string()),
            ("t", _t),
            ("node", _id),
            ("topic", pa.string()),
            ("layer", pa.string()),
            ("neighbors", pa.list_(_id)),
            ("state", pa.string()),
        ]
    ),
    "checks": pa.schema(
        [
            ("run_id", pa.string()),
            ("t", _t),
            ("predicate", pa.string()),
            ("value", pa.bool_()),
        ]
    ),
    "faults": pa.schema(
        [
            ("run_id", pa.string()),
            ("t", _t),
            ("kind", pa.string()),
            ("detail", pa.string()),
        ]
    ),
    "events": pa.schema(
        [
            ("run_id", pa.string()),
            ("t", _t),
            ("node", _id),
            ("kind", pa.string()),
            ("detail", pa.string()),
        ]
    ),
}

#: Tables every run directory must contain (possibly with zero rows).
REQUIRED_TABLES = ("runs", "nodes", "subscriptions", "publications", "deliveries")
#: Exactly one of these holds the message trace, according to runs.messages_mode.
MESSAGE_TABLES = ("messages", "message_counts")
TABLES = tuple(SCHEMAS)
