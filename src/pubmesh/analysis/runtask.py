"""A small run's metrics in one Spark task: the definitions of :mod:`pubmesh.analysis.metrics`
over one run's tables in memory.

A Spark plan pays a fixed cost per query (planning, scheduling, a stage per shuffle), whatever
the data: the fifteen queries of :func:`pubmesh.analysis.job.compute` took 15 s on the
README's 1,000-node run on a warm server, for a trace of 17 MB that pandas reads and reduces in
a second. So a run whose trace is small (:data:`TASK_RUN_BYTES`) is analysed as one Spark
task: the driver makes ``spark.range`` with one partition per run, ``mapInArrow`` hands
each task its run's index into the runs' descriptions (:func:`unit`: where its files are),
which travel with the task's function, and each task returns every metric table of its run
as Arrow data. Many runs (a
sweep) are as many tasks, side by side on every executor; a large run keeps the Spark plan,
which spreads one run's rows over the cluster.

Every function here computes, over one run, exactly what its namesake in
:mod:`pubmesh.analysis.metrics` computes over all (the definitions are that module's
docstring, with the papers cited there): the same rows, the same types, the same values up to
the order of floating-point sums. ``tests/analysis/test_analysis_tasks.py`` holds the two to
each other on traces of every stack, with faults, content filters, histories and message
counts.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pubmesh.analysis.load import read_files
from pubmesh.analysis.metrics import (
    CDF_POINTS,
    EVENT_COUNTS,
    EXACT_DIAMETER_MAX,
    INFINITY,
    PERCENTILES,
)
from pubmesh.trace.schema import SCHEMAS

#: a run whose trace holds at most this many bytes of Parquet is analysed in one task
#: (pandas holds it in a few times that in memory); a larger one by the Spark plan
TASK_RUN_BYTES = 64 * 1024 * 1024


_l, _d, _s, _b, _i = pa.int64(), pa.float64(), pa.string(), pa.bool_(), pa.int32()
#: the metric tables' columns and types, as the Spark plan writes them
OUTPUT_SCHEMAS = {
    "publications": pa.schema([
        ("run_id", _s), ("pub_id", _l), ("publisher", _l), ("topic", _s), ("t", _d),
        ("expected", _l), ("delivered", _l), ("reliability", _d), ("receivers", _l),
        ("duplicates", _l), ("latency_p50", _d), ("latency_p95", _d), ("latency_p99", _d),
        ("latency_max", _d), ("hops_mean", _d), ("ldh", _i), ("payload_messages", _l),
        ("rmr", _d), ("false_positives", _l), ("payload_received", _l),
    ]),
    "nodes": pa.schema([
        ("run_id", _s), ("node", _l), ("role", _s), ("sent", _l), ("received", _l),
        ("load", _l), ("payload_sent", _l), ("control_sent", _l), ("control_overhead", _d),
        ("deliveries", _l),
    ]),
    "node_messages": pa.schema([
        ("run_id", _s), ("node", _l), ("type", _s), ("layer", _s), ("payload", _b),
        ("sent", _l), ("received", _l), ("bytes_sent", _l),
    ]),
    "overlay": pa.schema([
        ("run_id", _s), ("t", _d), ("topic", _s), ("nodes", _l), ("edges", _l),
        ("degree_max", _l), ("degree_mean", _d), ("diameter", _l), ("connected", _b),
        ("diameter_exact", _b),
    ]),
    "messages_per_second": pa.schema([
        ("run_id", _s), ("second", _l), ("type", _s), ("layer", _s), ("payload", _b),
        ("sent", _l),
    ]),
    "runs": pa.schema([
        ("run_id", _s), ("stack", _s), ("runtime", _s), ("nodes", _l), ("seed", _l),
        ("duration", _d), ("publications", _l), ("expected", _l), ("delivered", _l),
        ("reliability", _d), ("history_reliability", _d), ("duplicates", _l),
        ("order_violations", _l), ("latency_p50", _d), ("latency_p95", _d),
        ("latency_p99", _d), ("latency_max", _d), ("rmr_mean", _d), ("rmr_std", _d),
        ("ldh_mean", _d), ("ldh_std", _d), ("rmr_late", _d), ("ldh_late", _d),
        ("messages", _l), ("payload_messages", _l), ("false_positive_rate", _d),
        ("control_messages", _l), ("control_overhead", _d), ("load_max", _l),
        ("load_mean", _d), ("load_gini", _d), ("degree_max", _l), ("degree_mean", _d),
        ("diameter", _l), ("convergence_time", _d),
        ("supervisor_messages_per_subscribe", _d), ("supervisor_messages_per_unsubscribe", _d),
        ("config_requests", _d), ("filter_conjunctions_mean", _d),
        ("filter_conjunctions_max", _l), ("stalls", _l), ("tagged", _l),
        ("safety_drops", _l), ("replayed", _l),
    ]),
    # what the report's charts need beyond the tables: each run's latency CDF and its degree
    # histogram at the last snapshot
    "cdf": pa.schema([("run_id", _s), ("q", _d), ("latency", _d)]),
    "degrees": pa.schema([("run_id", _s), ("degree", _l), ("count", _l)]),
}  # fmt: skip

#: what a task returns: one row per (run, table), the table as an Arrow IPC stream
RESULT_SCHEMA = pa.schema([("run_id", _s), ("table", _s), ("data", pa.binary())])


# --------------------------------------------------------------------------------------------
# The task
# --------------------------------------------------------------------------------------------
def unit(run_id: str, partitioned: bool, files: dict[str, list[str]], **context: Any) -> str:
    """One run as a task reads it: where its tables' files are (for a sweep dataset,
    the files of its own ``run_id=`` partition; for a run directory, every file, the task
    keeping this run's rows) and what the driver knows of it (``non_overlay_layers``,
    ``timeout_interval``)."""
    return json.dumps(
        {"run_id": run_id, "partitioned": partitioned, "files": files, **context},
        sort_keys=True,
    )


def task_of(units: Sequence[str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over ``spark.range`` ids: for each id, every metric table of the
    run ``units[id]`` (:func:`unit`) as rows of :data:`RESULT_SCHEMA`."""
    for batch in batches:
        for index in batch.column("id").to_pylist():
            spec = json.loads(units[index])
            encoded = analyse(spec)
            rows = [(spec["run_id"], name, data) for name, data in encoded.items()]
            yield pa.RecordBatch.from_arrays(
                [pa.array([r[i] for r in rows], t.type) for i, t in enumerate(RESULT_SCHEMA)],
                schema=RESULT_SCHEMA,
            )


def analyse(spec: dict[str, Any]) -> dict[str, bytes]:
    """Every table of :data:`OUTPUT_SCHEMAS` of the run ``spec`` describes (:func:`unit`), each
    as an Arrow IPC stream (:func:`from_ipc` reads it back)."""
    out = run_metrics(
        read_run(spec),
        non_overlay_layers=spec.get("non_overlay_layers", []),
        timeout_interval=spec.get("timeout_interval"),
    )
    encoded = {}
    for name, frame in out.items():
        sink = pa.BufferOutputStream()
        table = to_arrow(name, frame)
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        encoded[name] = sink.getvalue().to_pybytes()
    return encoded


def read_run(spec: dict[str, Any]) -> dict[str, Any]:
    """The run's trace tables as pandas frames, but the messages as an Arrow table (every
    trace v1 table; empty where absent), read as :func:`pubmesh.analysis.load.read_files`
    reads them.
    A file that cannot be read is named in the error, which Spark carries to the driver."""
    run_id = spec["run_id"]
    frames = {}
    for table, schema in SCHEMAS.items():
        paths = [Path(p) for p in spec["files"].get(table, [])]
        whole = read_files(paths, spec["partitioned"], table) if paths else schema.empty_table()
        # a run directory's files hold every run of it; a sweep dataset's partition only its
        # own, but a file beside the partitions holds any
        whole = whole.filter(pc.equal(whole["run_id"], run_id))
        # the messages stay Arrow (the largest table by far): their totals are Arrow
        # aggregates, and only the rows a metric reads one by one become pandas
        frames[table] = whole if table == "messages" else _frame(whole)
    return frames


def _frame(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas(types_mapper=_nullable)


def _count(table: pa.Table, keys: list[str], name: str) -> pa.Table:
    """Rows of ``table`` per ``keys`` (a null key is a group, as in Spark), as ``name``."""
    counted = table.group_by(keys).aggregate([("t_send", "count", pc.CountOptions(mode="all"))])
    return counted.rename_columns(
        [name if c == "t_send_count" else c for c in counted.column_names]
    )


def _nullable(arrow: pa.DataType) -> Any:
    """Integers and booleans as pandas' nullable types (a null stays null, not NaN)."""
    if pa.types.is_integer(arrow):
        return pd.Int64Dtype()
    if pa.types.is_boolean(arrow):
        return pd.BooleanDtype()
    return None


def to_arrow(name: str, frame: pd.DataFrame) -> pa.Table:
    """``frame`` as table ``name`` of :data:`OUTPUT_SCHEMAS` (NaN in an integer column is
    null)."""
    schema = OUTPUT_SCHEMAS[name]
    arrays = []
    for field in schema:
        column = frame[field.name] if field.name in frame else pd.Series([None] * len(frame))
        values = column.astype(object).where(column.notna(), None).tolist()
        if pa.types.is_integer(field.type):
            values = [None if v is None else int(v) for v in values]
        elif pa.types.is_floating(field.type):
            values = [None if v is None else float(v) for v in values]
        elif pa.types.is_boolean(field.type):
            values = [None if v is None else bool(v) for v in values]
        arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# --------------------------------------------------------------------------------------------
# Metrics of one run
# --------------------------------------------------------------------------------------------
def run_metrics(
    t: dict[str, pd.DataFrame],
    *,
    non_overlay_layers: Sequence[str] = (),
    timeout_interval: float | None = None,
) -> dict[str, pd.DataFrame]:
    """Every table of :data:`OUTPUT_SCHEMAS` for the one run in ``t``."""
    run = t["runs"].iloc[0]
    first = first_deliveries(t["deliveries"], t["publications"])
    matcher = _Matcher(t["publications"])
    publications = per_publication(t, first, expected_pairs(t, matcher))
    totals = message_totals(t)
    nodes = per_node(t, totals, first)
    degrees, edges = overlay_graphs(t["snapshots"], non_overlay_layers)
    overlay = overlay_of(degrees, edges)
    overlay.insert(0, "run_id", run["run_id"])
    convergence = convergence_time(t["checks"])
    out = {
        "publications": publications,
        "nodes": nodes,
        "node_messages": totals,
        "overlay": overlay,
        "messages_per_second": messages_per_second(t),
        "cdf": _cdf(run["run_id"], first),
        "degrees": _degree_counts(run["run_id"], degrees),
    }
    row: dict[str, Any] = {k: run[k] for k in ("run_id", "stack", "runtime", "nodes", "seed",
                                                 "duration")}  # fmt: skip
    row.update(_publication_summary(publications))
    row["history_reliability"] = history_reliability(t, expected_pairs(t, matcher, history=True))
    row["order_violations"] = order_violations(first, t["publications"])
    row.update(_latency(first["latency"]))
    row.update(_message_summary(totals))
    row.update(load_summary(nodes))
    row.update(overlay_final(overlay))
    row["convergence_time"] = convergence
    row.update(event_metrics(t["events"]))
    row["config_requests"] = config_requests(t, convergence, timeout_interval, run["duration"])
    row.update(edge_filters(t["snapshots"]))
    expected = row["expected"]
    row["reliability"] = row["delivered"] / expected if expected > 0 else None
    out["runs"] = pd.DataFrame([row])
    return out


def _sorted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return frame.sort_values(keys, kind="mergesort", na_position="first").reset_index(drop=True)


def _spark_percentile(values: np.ndarray, q: float) -> float | None:
    """Percentile ``q`` of sorted ``values`` as Spark's ``percentile`` computes it (position
    (n - 1)·q between its floor and ceiling, the same double operations); None without
    values."""
    n = len(values)
    if n == 0:
        return None
    position = (n - 1) * q
    low, high = math.floor(position), math.ceil(position)
    low_value, high_value = float(values[low]), float(values[high])
    if high == low or low_value == high_value:
        return low_value
    return (high - position) * low_value + (position - low) * high_value


def _latency(latencies: pd.Series) -> dict[str, Any]:
    values = np.sort(latencies.dropna().to_numpy(dtype=float))
    out: dict[str, Any] = {f"latency_{name}": _spark_percentile(values, q)
                           for name, q in PERCENTILES}  # fmt: skip
    out["latency_max"] = float(values[-1]) if len(values) else None
    return out


def _cdf(run_id: str, first: pd.DataFrame) -> pd.DataFrame:
    values = np.sort(first["latency"].dropna().to_numpy(dtype=float))
    if not len(values):
        return pd.DataFrame(columns=["run_id", "q", "latency"])
    return pd.DataFrame(
        {"run_id": run_id, "q": [i / 100.0 for i in range(101)],
         "latency": [_spark_percentile(values, q) for q in CDF_POINTS]}
    )  # fmt: skip


def life_intervals(nodes: pd.DataFrame) -> pd.DataFrame:
    """(node, t_up, t_down): :func:`pubmesh.analysis.metrics.life_intervals`."""
    ordered = _sorted(nodes[["node", "t", "event"]], ["node", "t", "event"])
    t_next = ordered.groupby("node", sort=False)["t"].shift(-1)
    up = ordered["event"].isin(["up", "recover"]).to_numpy(dtype=bool)
    return pd.DataFrame(
        {
            "node": ordered["node"][up].to_numpy(),
            "t_up": ordered["t"][up].to_numpy(dtype=float),
            "t_down": t_next[up].fillna(INFINITY).to_numpy(dtype=float),
        }
    )


def first_deliveries(deliveries: pd.DataFrame, publications: pd.DataFrame) -> pd.DataFrame:
    """(pub_id, node, t, hops, copies, latency, topic, t_publish) per delivered (publication,
    node): the earliest time, the fewest hops at it, the copies (metrics.first_deliveries)."""
    cols = ["pub_id", "node", "t", "hops", "copies", "latency", "topic", "t_publish"]
    if deliveries.empty:
        return pd.DataFrame(columns=cols)
    d = _sorted(deliveries[["pub_id", "node", "t", "hops"]], ["pub_id", "node", "t", "hops"])
    grouped = d.groupby(["pub_id", "node"], sort=False)
    first = d[~d.duplicated(["pub_id", "node"])].copy()
    first["copies"] = grouped.size().to_numpy()
    publish = publications[["pub_id", "topic", "t"]].rename(columns={"t": "t_publish"})
    first = first.merge(publish, on="pub_id", how="inner")
    first["latency"] = first["t"] - first["t_publish"]
    return first[cols].reset_index(drop=True)


def _text(value: Any) -> str | None:
    """A JSON value as Spark's ``from_json(..., map<string,string>)`` gives it: strings as
    they are, numbers as their literal text (kept by the parser), objects and lists as JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":"))


def _loads(text: Any) -> Any:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return None
    try:
        return json.loads(text, parse_int=_Literal, parse_float=_Literal)
    except ValueError:
        return None


class _Literal(str):
    """A JSON number kept as the text it was written as (Spark reads it into a string as
    such)."""

    def __repr__(self) -> str:
        return str(self)


def _number(text: str | None) -> float | None:
    """``text`` as a double when Spark's cast would make one, else None."""
    if text is None:
        return None
    if "_" in text:  # Python reads 1_000; Spark's cast does not
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


#: the comparison operators of the filter language, for two numbers, two texts or a column of
#: numbers against one
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne,
}  # fmt: skip


def _satisfied(op: str, value: str | None, actual: str | None) -> bool:
    """metrics._satisfied for one constraint and one attribute value."""
    if actual is None:
        return False
    if op == "prefix":
        return value is not None and actual.startswith(value)
    a_num = _number(actual)
    if op == "in":
        listed = _loads(value)
        if not isinstance(listed, list):
            return False
        for item in listed:
            x = _text(item) if not isinstance(item, _Literal) else str(item)
            if x is None:
                continue
            x_num = _number(x)
            if (x_num == a_num) if (x_num is not None and a_num is not None) else (x == actual):
                return True
        return False
    if op not in _COMPARE or value is None:
        return False
    v_num = _number(value)
    a, v = (a_num, v_num) if a_num is not None and v_num is not None else (actual, value)
    return bool(_COMPARE[op](a, v))


def _constraints(filter_text: str) -> list[tuple[str, str, str | None]] | None:
    """(attr, op, value) of a filter (a bare value: eq); None when it is not a JSON object."""
    parsed = _loads(filter_text)
    if not isinstance(parsed, dict):
        return None
    out: list[tuple[str, str, str | None]] = []
    for attr, constraint in parsed.items():
        text = _text(constraint)
        if text is not None and text.startswith("{") and isinstance(constraint, dict):
            out.extend((attr, op, _text(v)) for op, v in constraint.items())
        elif text is not None and text.startswith("{"):
            continue
        else:
            out.append((attr, "eq", text))
    return out


def _attributes(publications: pd.DataFrame) -> list[dict[str, str | None]]:
    out = []
    for text in publications["attributes"].tolist():
        parsed = _loads(text)
        out.append({k: _text(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {})
    return out


class _Matcher:
    """Constraints (attr, op, value) evaluated over every publication of a run, each once."""

    def __init__(self, pubs: pd.DataFrame) -> None:
        self.attrs = _attributes(pubs)
        self.size = len(pubs)
        self.texts: dict[str, list[str | None]] = {}
        self.numbers: dict[str, np.ndarray] = {}
        self.known: dict[tuple[str, str, str | None], np.ndarray] = {}

    def _column(self, attr: str) -> tuple[list[str | None], np.ndarray]:
        if attr not in self.texts:
            texts = [a.get(attr) for a in self.attrs]
            numbers = [_number(x) for x in texts]
            self.texts[attr] = texts
            self.numbers[attr] = np.array(
                [np.nan if x is None else x for x in numbers], dtype=float
            )
        return self.texts[attr], self.numbers[attr]

    def mask(self, attr: str, op: str, value: str | None) -> np.ndarray:
        key = (attr, op, value)
        if key not in self.known:
            texts, numbers = self._column(attr)
            v_num = _number(value) if op in _COMPARE else None
            if op == "in":
                out = self._in(texts, numbers, value)
            elif v_num is not None and not math.isnan(v_num):
                # a number against a number: vectorized; the rest one by one
                numeric = ~np.isnan(numbers)
                with np.errstate(invalid="ignore"):
                    out = _COMPARE[op](numbers, v_num) & numeric
                for i in np.flatnonzero(~numeric):
                    out[i] = _satisfied(op, value, texts[i])
            else:
                out = np.array([_satisfied(op, value, x) for x in texts], dtype=bool)
            self.known[key] = out
        return self.known[key]

    @staticmethod
    def _in(texts: list[str | None], numbers: np.ndarray, value: str | None) -> np.ndarray:
        """``in``: a number equals a listed number, a text that is no number a listed text
        (an item and a value equal as texts are both numbers or both not)."""
        listed = _loads(value)
        if not isinstance(listed, list):
            return np.zeros(len(texts), dtype=bool)
        items = [str(x) if isinstance(x, _Literal) else _text(x) for x in listed]
        as_numbers = {n for x in items if (n := _number(x)) is not None}
        as_texts = {x for x in items if x is not None and _number(x) is None}
        numeric = ~np.isnan(numbers)
        out: np.ndarray = np.isin(numbers, list(as_numbers)) & numeric
        for i in np.flatnonzero(~numeric):
            out[i] = texts[i] is not None and texts[i] in as_texts
        return out


def expected_pairs(
    t: dict[str, pd.DataFrame], matcher: _Matcher | None = None, *, history: bool = False
) -> pd.DataFrame:
    """(pub_id, node): the pairs ``reliability`` (or, with ``history``,
    ``history_reliability``) expects (metrics.expected_pairs)."""
    pubs, subs = t["publications"], t["subscriptions"]
    window_end = float(t["runs"]["duration"].iloc[0])
    life = life_intervals(t["nodes"])
    parts = []
    # subscriptions to a topic: the earliest time each (topic, node) is covered to the end
    by_topic = subs[subs["filter"].isna() & subs["topic"].notna()]
    by_topic = by_topic[by_topic["t_end"].isna() | (by_topic["t_end"] >= window_end)]
    lasting = life[life["t_down"] >= window_end]
    since = by_topic[["node", "topic", "t_start"]].merge(lasting[["node", "t_up"]], on="node")
    if not since.empty and not pubs.empty:
        since = since.assign(since=np.maximum(since["t_start"], since["t_up"]))
        since = since.groupby(["topic", "node"], as_index=False)["since"].min()
        joined = pubs[["pub_id", "topic", "t"]].merge(since, on="topic")
        start = window_end if history else joined["t"]
        parts.append(joined[joined["since"] <= start][["pub_id", "node"]])
    # subscriptions with a filter: each a conjunction of constraints, each constraint
    # evaluated once over every publication (subscriptions share them)
    with_filter = subs[subs["filter"].notna()]
    if not with_filter.empty and not pubs.empty:
        matcher = matcher or _Matcher(pubs)
        up = lasting.groupby("node")["t_up"].min().to_dict()
        start_at = np.full(len(pubs), window_end) if history else pubs["t"].to_numpy(dtype=float)
        pub_ids = pubs["pub_id"].to_numpy(dtype=np.int64)
        topics = pubs["topic"].to_numpy(dtype=object)
        found_pubs, found_nodes = [], []
        for sub in with_filter.itertuples(index=False):
            if not (pd.isna(sub.t_end) or sub.t_end >= window_end) or sub.node not in up:
                continue
            constraints = _constraints(sub.filter)
            if constraints is None:
                continue
            mask = start_at >= max(float(sub.t_start), up[sub.node])
            if sub.topic is not None and not pd.isna(sub.topic):
                mask &= topics == sub.topic
            for constraint in constraints:
                if not mask.any():
                    break
                mask &= matcher.mask(*constraint)
            hits = pub_ids[mask]
            found_pubs.append(hits)
            found_nodes.append(np.full(len(hits), sub.node, dtype=np.int64))
        if found_pubs:
            parts.append(pd.DataFrame({"pub_id": np.concatenate(found_pubs),
                                       "node": np.concatenate(found_nodes)}))  # fmt: skip
    if not parts:
        return pd.DataFrame(
            {"pub_id": pd.Series([], dtype="Int64"), "node": pd.Series([], dtype="Int64")}
        )
    pairs = pd.concat(parts, ignore_index=True).astype({"pub_id": "Int64", "node": "Int64"})
    return pairs.drop_duplicates().reset_index(drop=True)


def per_publication(
    t: dict[str, pd.DataFrame], first: pd.DataFrame, pairs: pd.DataFrame
) -> pd.DataFrame:
    """One row per publication (metrics.per_publication); ``pairs`` are the expected ones
    (:func:`expected_pairs`)."""
    pubs = t["publications"]
    run_id = t["runs"]["run_id"].iloc[0]
    full = t["runs"]["messages_mode"].iloc[0] == "full"
    expected = pairs.groupby("pub_id").size()
    got = first.merge(pairs.assign(_expected=True), on=["pub_id", "node"], how="left")
    got["_expected"] = got["_expected"].fillna(False).astype(bool)
    by_pub = got.groupby("pub_id", sort=False)
    ordered = _sorted(got[["pub_id", "t", "hops"]], ["pub_id", "t", "hops"])
    last = ordered.drop_duplicates("pub_id", keep="last").set_index("pub_id")["hops"]
    values = got["latency"].to_numpy(dtype=float)
    latencies: dict[Any, np.ndarray] = {}
    for pub, rows in got.groupby("pub_id", sort=False).indices.items():
        mine = values[rows]
        latencies[pub] = np.sort(mine[~np.isnan(mine)])
    out = pubs[["run_id", "pub_id", "publisher", "topic", "t"]].copy()
    ids = out["pub_id"]
    out["expected"] = ids.map(expected).fillna(0)
    out["delivered"] = ids.map(got[got["_expected"]].groupby("pub_id").size()).fillna(0)
    out["receivers"] = ids.map(by_pub.size()).fillna(0)
    out["duplicates"] = ids.map((got["copies"] - 1).groupby(got["pub_id"]).sum()).fillna(0)
    for name, q in PERCENTILES:
        out[f"latency_{name}"] = [
            _spark_percentile(latencies.get(p, np.empty(0)), q) for p in ids.tolist()
        ]
    out["latency_max"] = ids.map(by_pub["latency"].max())
    out["hops_mean"] = ids.map(by_pub["hops"].mean())
    out["ldh"] = ids.map(last)
    payload = payload_messages(t)
    for column in ("payload_messages", "false_positives", "payload_received"):
        out[column] = ids.map(payload[column]).fillna(0) if full else None
    out["reliability"] = out["delivered"] / out["expected"].where(out["expected"] > 0)
    out["rmr"] = [
        m / (r - 1) - 1 if r >= 2 and m is not None and not pd.isna(m) else None
        for m, r in zip(out["payload_messages"], out["receivers"], strict=True)
    ]
    out["run_id"] = run_id
    return _sorted(out, ["pub_id"])[list(OUTPUT_SCHEMAS["publications"].names)]


def payload_messages(t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """(payload_messages, payload_received, false_positives) by pub_id
    (metrics.payload_messages)."""
    m = t["messages"]
    wanted = pc.and_(pc.fill_null(m["payload"], False), pc.is_valid(m["pub_id"]))
    payload = _frame(m.filter(wanted).select(["pub_id", "src", "dst", "t_recv"]))
    used = pd.concat(
        [
            t["deliveries"][["pub_id", "node"]],
            payload[["pub_id", "src"]].rename(columns={"src": "node"}),
        ]
    ).drop_duplicates()
    joined = payload.merge(
        used.assign(_used=True), left_on=["pub_id", "dst"], right_on=["pub_id", "node"],
        how="left",
    )  # fmt: skip
    received = joined["t_recv"].notna()
    unused = received & joined["_used"].isna()
    grouped = pd.DataFrame(
        {"pub_id": joined["pub_id"], "received": received, "fp": unused}
    ).groupby("pub_id")
    return pd.DataFrame(
        {
            "payload_messages": grouped.size(),
            "payload_received": grouped["received"].sum(),
            "false_positives": grouped["fp"].sum(),
        }
    )


def order_violations(first: pd.DataFrame, publications: pd.DataFrame) -> int:
    """metrics.order_violations of one run."""
    if first.empty:
        return 0
    keyed = first[["pub_id", "node", "t", "t_publish"]].merge(
        publications[["pub_id", "publisher"]], on="pub_id"
    )
    order = _sorted(publications[["t", "pub_id"]], ["t", "pub_id"])
    rank = pd.Series(np.arange(len(order)), index=order["pub_id"].to_numpy())
    keyed["issue"] = keyed["pub_id"].map(rank)
    keyed = _sorted(keyed, ["node", "publisher", "t", "pub_id"])
    keys = [keyed["node"], keyed["publisher"]]
    highest = keyed.groupby(keys, sort=False, dropna=False)["issue"].cummax()
    latest = highest.groupby(keys, sort=False, dropna=False).shift(1)
    return int((keyed["issue"] < latest).fillna(False).sum())


def message_totals(t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """(run_id, node, type, layer, payload, sent, received, bytes_sent)
    (metrics.message_totals)."""
    keys = ["node", "type", "layer", "payload"]
    m = t["messages"]
    sent = m.group_by(["src", "type", "layer", "payload"]).aggregate(
        [("t_send", "count", pc.CountOptions(mode="all")), ("bytes", "sum")]
    )
    by_src = _frame(sent).rename(
        columns={"src": "node", "t_send_count": "sent", "bytes_sum": "bytes_sent"}
    )
    by_src["bytes_sent"] = by_src["bytes_sent"].fillna(0)
    received = m.filter(pc.is_valid(m["t_recv"]))
    by_dst = _frame(_count(received, ["dst", "type", "layer", "payload"], "received"))
    by_dst = by_dst.rename(columns={"dst": "node"})
    counts = t["message_counts"]
    counted = counts.groupby(keys, dropna=False)[["sent", "received", "bytes_sent"]].sum()
    parts = [by_src, by_dst, counted.reset_index()]
    whole = pd.concat([p for p in parts if not p.empty], ignore_index=True)
    if whole.empty:
        return pd.DataFrame(columns=list(OUTPUT_SCHEMAS["node_messages"].names))
    out = whole.groupby(keys, dropna=False)[["sent", "received", "bytes_sent"]].sum(min_count=0)
    out = out.reset_index()
    out.insert(0, "run_id", t["runs"]["run_id"].iloc[0])
    return _sorted(out, keys)


def messages_per_second(t: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """(run_id, second, type, layer, payload, sent) (metrics.messages_per_second)."""
    keys = ["second", "type", "layer", "payload"]
    m = t["messages"]
    seconds = m.append_column("second", pc.cast(pc.floor(m["t_send"]), pa.int64()))
    full = _frame(_count(seconds, keys, "sent"))
    counted = t["message_counts"].groupby(keys, dropna=False)["sent"].sum().reset_index()
    out = pd.concat([p for p in (full, counted) if not p.empty] or [full], ignore_index=True)
    out.insert(0, "run_id", t["runs"]["run_id"].iloc[0])
    return _sorted(out, keys)


def per_node(t: dict[str, pd.DataFrame], totals: pd.DataFrame, first: pd.DataFrame) -> pd.DataFrame:
    """One row per node (metrics.per_node)."""
    nodes = _sorted(t["nodes"][["node", "t", "event", "role"]], ["node", "t", "event"])
    roles = nodes.drop_duplicates("node", keep="last").set_index("node")["role"]
    payload = totals["payload"].fillna(False).astype(bool)
    control = (~totals["payload"].astype("boolean")).fillna(False).astype(bool)
    sums = (
        pd.DataFrame(
            {
                "node": totals["node"],
                "sent": totals["sent"],
                "received": totals["received"],
                "payload_sent": totals["sent"].where(payload, 0),
                "control_sent": totals["sent"].where(control, 0),
            }
        )
        .groupby("node")[["sent", "received", "payload_sent", "control_sent"]]
        .sum()
    )
    out = pd.DataFrame({"node": roles.index, "role": roles.to_numpy()})
    for column in ("sent", "received", "payload_sent", "control_sent"):
        out[column] = out["node"].map(sums[column]).fillna(0)
    out["deliveries"] = out["node"].map(first.groupby("node").size()).fillna(0)
    duration = float(t["runs"]["duration"].iloc[0])
    out["load"] = out["sent"] + out["received"]
    out["control_overhead"] = out["control_sent"] / duration if duration > 0 else None
    out.insert(0, "run_id", t["runs"]["run_id"].iloc[0])
    return _sorted(out, ["node"])[list(OUTPUT_SCHEMAS["nodes"].names)]


def load_summary(nodes: pd.DataFrame) -> dict[str, Any]:
    """load_max, load_mean, load_gini, control_overhead (metrics.load_summary)."""
    if nodes.empty:
        return {}
    ranked = _sorted(nodes[["load", "node"]], ["load", "node"])
    loads = [int(x) for x in ranked["load"]]
    n, total = len(loads), sum(loads)
    weighted = sum((i + 1) * x for i, x in enumerate(loads))
    gini = 2 * weighted / (n * total) - (n + 1) / n if total > 0 else 0.0
    overhead = nodes["control_overhead"].dropna()
    return {
        "load_max": max(loads),
        "load_mean": total / n,
        "load_gini": gini,
        "control_overhead": overhead.astype(float).mean() if len(overhead) else None,
    }


def overlay_graphs(
    snapshots: pd.DataFrame, non_overlay_layers: Sequence[str] = ()
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(degrees, edges) of every snapshot graph: (t, topic, node, degree) per vertex and
    (t, topic, a, b) per undirected edge, a < b (metrics.overlay_edges, degrees_of)."""
    rows = snapshots[~snapshots["layer"].isin(list(non_overlay_layers))]
    # a null topic joins nothing in the plan (null = null is not true): no edges there
    vertices = rows[["t", "topic", "node"]].drop_duplicates()
    refs = rows[["t", "topic", "node", "neighbors"]].explode("neighbors")
    refs = refs[refs["neighbors"].notna()].astype({"neighbors": "int64", "node": "int64"})
    refs = refs[(refs["node"] != refs["neighbors"]) & refs["topic"].notna()]
    known = vertices.rename(columns={"node": "neighbors"}).astype({"neighbors": "int64"})
    refs = refs.merge(known, on=["t", "topic", "neighbors"])
    a = np.minimum(refs["node"].to_numpy(), refs["neighbors"].to_numpy())
    b = np.maximum(refs["node"].to_numpy(), refs["neighbors"].to_numpy())
    edges = pd.DataFrame({"t": refs["t"].to_numpy(), "topic": refs["topic"].to_numpy(),
                          "a": a, "b": b}).drop_duplicates()  # fmt: skip
    ends = pd.concat([edges[["t", "topic", "a"]].rename(columns={"a": "node"}),
                      edges[["t", "topic", "b"]].rename(columns={"b": "node"})])  # fmt: skip
    counts = ends.groupby(["t", "topic", "node"]).size().rename("degree").reset_index()
    degrees = vertices.astype({"node": "int64"}).merge(
        counts, on=["t", "topic", "node"], how="left"
    )
    degrees["degree"] = degrees["degree"].fillna(0).astype("int64")
    return degrees, edges


def overlay_of(degrees: pd.DataFrame, edges: pd.DataFrame) -> pd.DataFrame:
    """(run_id, t, topic, nodes, edges, degree_max, degree_mean, diameter, connected,
    diameter_exact) per snapshot graph (metrics.overlay_of)."""
    from pubmesh.analysis.graph import diameter

    keys = ["t", "topic"]
    ends_a, ends_b = edges["a"].to_numpy(), edges["b"].to_numpy()
    edge_rows = edges.groupby(keys, sort=False).indices if len(edges) else {}
    nodes, degree = degrees["node"].to_numpy(), degrees["degree"].to_numpy()
    rows = []
    for key, at in sorted(
        degrees.groupby(keys, sort=False, dropna=False).indices.items(),
        key=lambda item: (item[0][0], str(item[0][1])),
    ):
        found = edge_rows.get(key)
        pairs = (
            []
            if found is None
            else list(zip(ends_a[found].tolist(), ends_b[found].tolist(), strict=True))
        )
        value, connected, exact = diameter(
            sorted(nodes[at].tolist()), pairs, exact_limit=EXACT_DIAMETER_MAX
        )
        mine = degree[at]
        rows.append((key[0], key[1], len(at), int(mine.sum()) // 2, int(mine.max()),
                     float(mine.mean()), value, connected, exact))  # fmt: skip
    columns = ["t", "topic", "nodes", "edges", "degree_max", "degree_mean", "diameter",
               "connected", "diameter_exact"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def overlay_final(overlay: pd.DataFrame) -> dict[str, Any]:
    """degree_max, degree_mean, diameter at the last snapshot (metrics.overlay_final)."""
    if overlay.empty:
        return {}
    last = overlay[overlay["t"] == overlay["t"].max()]
    diameters = last["diameter"].dropna()
    return {
        "degree_max": int(last["degree_max"].max()),
        "degree_mean": float((last["degree_mean"] * last["nodes"]).sum() / last["nodes"].sum()),
        "diameter": int(diameters.max()) if len(diameters) else None,
    }


def _degree_counts(run_id: str, degrees: pd.DataFrame) -> pd.DataFrame:
    if degrees.empty:
        return pd.DataFrame(columns=["run_id", "degree", "count"])
    last = degrees[degrees["t"] == degrees["t"].max()]
    out = last.groupby("degree").size().rename("count").reset_index()
    out.insert(0, "run_id", run_id)
    return out


def edge_filters(snapshots: pd.DataFrame) -> dict[str, Any]:
    """filter_conjunctions_mean and _max at the last snapshot with filters
    (metrics.edge_filters)."""
    rows = []
    for at, state in zip(snapshots["t"], snapshots["state"], strict=True):
        if state is None or '"filters"' not in state:  # no such key: not parsed
            continue
        parsed = _loads(state)
        filters = parsed.get("filters") if isinstance(parsed, dict) else None
        if not isinstance(filters, dict):
            continue
        for value in filters.values():
            number = _number(value) if isinstance(value, str) else None
            if isinstance(value, _Literal) and number is not None and number.is_integer():
                rows.append((float(at), int(number)))
    if not rows:
        return {}
    last = max(at for at, _ in rows)
    sizes = [n for at, n in rows if at == last]
    return {
        "filter_conjunctions_mean": sum(sizes) / len(sizes),
        "filter_conjunctions_max": max(sizes),
    }


def convergence_time(checks: pd.DataFrame) -> float | None:
    """metrics.convergence_time of one run (None without checks, or when the predicate fails
    at the last check)."""
    if checks.empty:
        return None
    ok = checks.assign(ok=checks["value"].astype("Int64")).groupby("t")["ok"].min()
    bad = ok.eq(0).fillna(False).astype(bool)
    good = ok.eq(1).fillna(False).astype(bool)
    if bad.any():
        good &= ok.index > ok.index[bad.to_numpy()].max()
    return float(ok.index[good.to_numpy()].min()) if good.any() else None


def event_metrics(events: pd.DataFrame) -> dict[str, Any]:
    """metrics.event_metrics of one run."""
    counted = [kind for _, kind in EVENT_COUNTS]
    kinds = events["kind"]
    wanted = events[kinds.isin(["supervisor.subscribe", "supervisor.unsubscribe",
                                "history.replayed", *counted])]  # fmt: skip
    if wanted.empty:
        return {}

    def sent(kind: str) -> float | None:
        values = []
        for detail in wanted[wanted["kind"] == kind]["detail"]:
            parsed = _loads(detail)
            value = parsed.get("messages") if isinstance(parsed, dict) else None
            number = _number(value) if isinstance(value, str) else None
            if number is not None:
                values.append(number)
        return sum(values) / len(values) if values else None

    out: dict[str, Any] = {
        "supervisor_messages_per_subscribe": sent("supervisor.subscribe"),
        "supervisor_messages_per_unsubscribe": sent("supervisor.unsubscribe"),
    }
    any_counted = bool(wanted["kind"].isin(counted).any())
    for name, kind in EVENT_COUNTS:
        out[name] = int((wanted["kind"] == kind).sum()) if any_counted else None
    replayed = int((wanted["kind"] == "history.replayed").sum())
    out["replayed"] = replayed or None
    return out


def config_requests(
    t: dict[str, pd.DataFrame],
    convergence: float | None,
    timeout_interval: float | None,
    duration: float,
) -> float | None:
    """metrics.config_requests of one run."""
    if convergence is None or timeout_interval is None:
        return None
    open_subs = t["subscriptions"]
    topics = open_subs[open_subs["t_end"].isna()]["topic"].dropna().nunique()
    if open_subs[open_subs["t_end"].isna()].empty:
        return None
    m, counts = t["messages"], t["message_counts"]
    full = m.filter(
        pc.and_(
            pc.equal(m["type"], "ConfigurationRequest"), pc.greater_equal(m["t_send"], convergence)
        )
    )
    counted = counts[(counts["type"] == "ConfigurationRequest")
                     & (counts["second"].astype(float) >= convergence)]  # fmt: skip
    requests = full.num_rows + int(counted["sent"].sum())
    intervals = (duration - convergence) / timeout_interval
    if not (intervals > 0 and topics > 0):
        return None
    return float(requests / (topics * intervals))


def history_reliability(t: dict[str, pd.DataFrame], wanted: pd.DataFrame) -> float | None:
    """metrics.history_reliability of one run, from the pairs it expects
    (:func:`expected_pairs` with ``history``)."""
    if wanted.empty:
        return None
    got = t["deliveries"][["pub_id", "node"]].drop_duplicates().assign(hit=1)
    hits = wanted.merge(got, on=["pub_id", "node"], how="left")["hit"].notna().sum()
    return int(hits) / len(wanted)


def _publication_summary(pubs: pd.DataFrame) -> dict[str, Any]:
    """The per-run aggregates of the publications table (metrics.per_run's first part)."""
    if pubs.empty:
        return {"publications": 0, "expected": 0, "delivered": 0, "duplicates": 0}
    ordered = _sorted(pubs, ["t", "pub_id"])
    late = ordered.iloc[len(ordered) // 2 :]

    def mean(s: pd.Series) -> float | None:
        s = s.dropna().astype(float)
        return float(s.mean()) if len(s) else None

    def std(s: pd.Series) -> float | None:
        s = s.dropna().astype(float)
        return float(s.std(ddof=1)) if len(s) >= 2 else None

    received = pubs["payload_received"].dropna()
    payload = pubs["payload_messages"].dropna()
    return {
        "publications": len(pubs),
        "expected": int(pubs["expected"].sum()),
        "delivered": int(pubs["delivered"].sum()),
        "duplicates": int(pubs["duplicates"].sum()),
        "rmr_mean": mean(pubs["rmr"]),
        "rmr_std": std(pubs["rmr"]),
        "ldh_mean": mean(pubs["ldh"]),
        "ldh_std": std(pubs["ldh"]),
        "payload_messages": int(payload.sum()) if len(payload) else None,
        "false_positive_rate": (
            int(pubs["false_positives"].dropna().sum()) / int(received.sum())
            if len(received) and received.sum() > 0 else None
        ),
        "rmr_late": mean(late["rmr"]),
        "ldh_late": mean(late["ldh"]),
    }  # fmt: skip


def _message_summary(totals: pd.DataFrame) -> dict[str, Any]:
    if totals.empty:
        return {}
    control = (~totals["payload"].astype("boolean")).fillna(False).astype(bool)
    return {
        "messages": int(totals["sent"].sum()),
        "control_messages": int(totals["sent"].where(control, 0).sum()),
    }
