"""Gather a cluster's partial traces into one run directory that reads like a simulated run.

Inputs: every node's partial trace (:mod:`pubmesh.net.tracing`: complete segments only; a
SIGKILLed node lost its last seconds) and the cluster controller's own records, which are
authoritative for what the controller decided and observed: the runs row, node lifecycle
(``up`` when it booted a node, ``crash`` when it killed one, ``leave``), subscriptions,
publications (from the nodes' answers to its commands, so a publication is known even if its
publisher is killed a moment later) and faults.

Output: trace v1 with ``runtime = "net"``, times in seconds from the run's start and node ids
remapped from network ids (``ip << 16 | port``) to 0..N-1 in launch order, so
``pubmesh analyze`` reads it exactly as it reads a simulator's run. Ids that belong to no
cluster node (a stranger that connected) keep their network id.

Messages: a sent frame is a row with ``t_recv`` null in its sender's trace, a received frame a
row with both times in its receiver's trace (the send time travels in the frame header). Rows
are matched on (src, dst, t_send, type): every received row is kept, and each sent row without a
matching received row becomes a lost message (``t_recv`` null), as in a simulated run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pubmesh.net.tracing import segments
from pubmesh.trace.schema import SCHEMA_VERSION, SCHEMAS
from pubmesh.trace.writer import PART_NAME, TraceWriter


@dataclass
class ControllerRecords:
    """What the cluster controller knows, in run time and node indexes."""

    nodes: list[tuple[int, float, str, str]] = field(default_factory=list)
    #: (node, topic, t_start, t_end or None)
    subscriptions: list[tuple[int, str, float, float | None]] = field(default_factory=list)
    #: (pub_id, publisher, topic, t, size)
    publications: list[tuple[int, int, str, float, int]] = field(default_factory=list)
    #: (t, kind, detail)
    faults: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    #: the controller's own trace events: (t, node, kind, detail); node -1 = the run as a
    #: whole (pubmesh.net.cluster.controller.CONTROLLER)
    events: list[tuple[float, int, str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    stack: str
    nodes: int
    seed: int
    scenario: str
    duration: float


def read_table(node_dirs: Iterable[Path], table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` in the complete segments of the given partial traces."""
    files: list[str] = []
    for directory in node_dirs:
        for segment in segments(directory):
            path = segment / table / PART_NAME
            if path.is_file():
                files.append(str(path))
    if not files:
        return []
    tables = []
    for name in files:
        try:
            tables.append(pq.read_table(name, schema=SCHEMAS[table]))
        except (OSError, pa.ArrowInvalid):
            continue  # a segment being written when its node was killed
    if not tables:
        return []
    rows: list[dict[str, Any]] = pa.concat_tables(tables).to_pylist()
    return rows


def gather(
    run_dir: Path,
    info: RunInfo,
    node_dirs: Mapping[int, Path],
    id_map: Mapping[int, int],
    t0: float,
    records: ControllerRecords,
) -> dict[str, int]:
    """Write the run directory; returns row counts per table."""
    dirs = [node_dirs[i] for i in sorted(node_dirs)]

    def node(net_id: int | None) -> int | None:
        if net_id is None:
            return None
        return id_map.get(net_id, net_id)

    def at(t: float | None) -> float | None:
        return None if t is None else t - t0

    with TraceWriter(run_dir, info.run_id, messages_mode="full") as writer:
        writer.run(
            stack=info.stack,
            runtime="net",
            nodes=info.nodes,
            seed=info.seed,
            scenario=info.scenario,
            duration=info.duration,
            schema_version=SCHEMA_VERSION,
        )
        for index, t, event, role in sorted(records.nodes, key=lambda r: (r[1], r[0])):
            writer.node(index, t, event, role)
        for index, topic, t_start, t_end in sorted(
            records.subscriptions, key=lambda r: (r[2], r[0], r[1])
        ):
            writer.subscription(index, topic, t_start, t_end)

        # publications: the controller's, plus any a node traced that the controller missed
        known = {pub_id for pub_id, *_ in records.publications}
        publications = list(records.publications)
        for row in read_table(dirs, "publications"):
            if row["pub_id"] not in known:
                known.add(row["pub_id"])
                publications.append(
                    (
                        row["pub_id"],
                        node(row["publisher"]) or 0,
                        row["topic"],
                        row["t"] - t0,
                        row["size"],
                    )
                )
        for pub_id, publisher, topic, t, size in sorted(publications, key=lambda r: (r[3], r[0])):
            writer.publication(pub_id, publisher, topic, t, size)

        deliveries = read_table(dirs, "deliveries")
        for row in sorted(deliveries, key=_key("t", "node", "pub_id")):
            writer.delivery(row["pub_id"], node(row["node"]) or 0, row["t"] - t0, row["hops"])

        messages = _merge_messages(read_table(dirs, "messages"))
        for row in messages:
            writer.message(
                row["t_send"] - t0,
                at(row["t_recv"]),
                node(row["src"]) or 0,
                node(row["dst"]) or 0,
                row["type"],
                row["layer"],
                row["payload"],
                row["pub_id"],
                row["bytes"],
            )

        for row in sorted(read_table(dirs, "snapshots"), key=_key("t", "node", "topic", "layer")):
            writer.snapshot(
                row["t"] - t0,
                node(row["node"]) or 0,
                row["topic"],
                row["layer"],
                [node(n) or 0 for n in row["neighbors"]],
                _json(row["state"]),
            )
        for t, kind, detail in sorted(records.faults, key=lambda r: (r[0], r[1])):
            writer.fault(t, kind, detail)
        events: list[tuple[float, int, str, dict[str, Any]]] = list(records.events)
        for row in read_table(dirs, "events"):
            detail = _json(row["detail"])
            for name in ("peer",):
                if isinstance(detail.get(name), int):
                    detail[name] = node(detail[name])
            events.append((row["t"] - t0, node(row["node"]) or 0, row["kind"], detail))
        for t, index, kind, detail in sorted(events, key=lambda e: (e[0], e[1], e[2])):
            writer.event(t, index, kind, detail)
        counts = dict(writer.rows_written)
    return {**counts, "deliveries": len(deliveries), "messages": len(messages)}


def _key(*names: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[name] for name in names)

    return key


def _json(text: str | None) -> dict[str, Any]:
    import json

    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


def _merge_messages(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    received: Counter[tuple[Any, ...]] = Counter()
    out: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    for row in rows:
        if row["t_recv"] is None:
            sent.append(row)
        else:
            received[(row["src"], row["dst"], row["t_send"], row["type"])] += 1
            out.append(row)
    for row in sent:
        key = (row["src"], row["dst"], row["t_send"], row["type"])
        if received[key] > 0:
            received[key] -= 1
        else:
            out.append(row)
    out.sort(key=lambda r: (r["t_send"], r["src"], r["dst"], r["t_recv"] is None))
    return out


def summarize(run_dir: Path | str) -> dict[str, float]:
    """Headline figures of a gathered run: reliability (delivered expected pairs ÷ expected
    pairs, expected = subscribed at the publish time and still subscribed, alive, at the end),
    duplicates, and publish-to-delivery latency percentiles of first deliveries."""
    root = Path(run_dir)

    def rows(table: str) -> list[dict[str, Any]]:
        path = root / table / PART_NAME
        if not path.is_file():
            return []
        result: list[dict[str, Any]] = pq.read_table(path).to_pylist()
        return result

    subscriptions = rows("subscriptions")
    publications = rows("publications")
    deliveries = rows("deliveries")
    first: dict[tuple[int, int], float] = {}
    for row in deliveries:
        key = (row["pub_id"], row["node"])
        if key not in first or row["t"] < first[key]:
            first[key] = row["t"]
    by_topic: dict[str, list[tuple[int, float]]] = {}
    for row in subscriptions:
        if row["t_end"] is None:
            by_topic.setdefault(row["topic"], []).append((row["node"], row["t_start"]))
    expected = delivered = 0
    latencies: list[float] = []
    for pub in publications:
        for subscriber, t_start in by_topic.get(pub["topic"], []):
            if t_start <= pub["t"]:
                expected += 1
                if (pub["pub_id"], subscriber) in first:
                    delivered += 1
    publish_time = {pub["pub_id"]: pub["t"] for pub in publications}
    for (pub_id, _node), t in first.items():
        if pub_id in publish_time:
            latencies.append(t - publish_time[pub_id])
    latencies.sort()

    def percentile(q: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {
        "expected_pairs": float(expected),
        "delivered_pairs": float(delivered),
        "reliability": delivered / expected if expected else float("nan"),
        "duplicates": float(len(deliveries) - len(first)),
        "latency_p50": percentile(0.50),
        "latency_p99": percentile(0.99),
    }
