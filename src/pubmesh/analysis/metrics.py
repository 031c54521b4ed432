"""The metrics of docs/design.md, as pure ``DataFrame -> DataFrame`` functions over trace v1.

Every function here takes Spark DataFrames with the trace v1 columns (see
:mod:`pubmesh.trace.schema`) and returns a DataFrame; none collects to the driver, none loops
in Python over rows, so the same code runs on a laptop in local mode and on a cluster over
millions of rows. The names are docs/design.md's, one name each, everywhere:

``reliability``
    delivered expected (subscriber, publication) pairs ÷ expected pairs. A pair is *expected*
    when the subscriber's subscription (same topic, or a filter matching the publication's
    attributes) and its life both cover the interval from the publish time to the end of the
    observation window (``runs.duration``). This is an interval question and is answered with
    interval joins (:func:`expected_pairs`): subscription intervals [t_start, t_end) and life
    intervals [up, next event) built with a window function over the ``nodes`` table.
``history_reliability`` (skipring's full-history guarantee, Feldmann et al. §4)
    every publication ever issued on a topic counts for every subscriber subscribed and alive
    at the end, whenever it joined.
``duplicates``, ``order_violations``
    deliveries beyond the first of a (publication, node); deliveries at a node of a
    publication older (publish time, then id) than one already delivered there from the same
    publisher.
``latency``
    first delivery time − publish time, p50/p95/p99 (exact, linearly interpolated) and max.
``hops``, ``ldh``
    hops of first deliveries; the last delivery hop is the hop count of the chronologically
    last first delivery of a publication (Plumtree, Leitão et al. 2007 §4: "the number of hops
    required to deliver a broadcast message to all recipients").
``rmr``
    payload messages ÷ (receivers − 1) − 1 per publication (Plumtree §4), receivers being the
    distinct nodes that delivered it; null with fewer than two receivers or when the trace
    keeps message counts only.
``rmr_late``, ``ldh_late``
    the run's mean RMR and LDH over its later half of publications (the last ⌈n/2⌉ by publish
    time, then id): a tree-building protocol's figures once its first broadcasts have shaped
    the tree (Plumtree §4 reports the steady state; the first broadcast floods).
``false_positives`` (Terpstra et al. §2.1; docs/protocols/chord.md §11.10)
    payload messages received by a node that neither delivers the publication nor forwards it
    (sends no payload message for it), per publication, and per run as ``false_positive_rate``
    = their sum ÷ payload messages received. What content routing's filters let through
    without need; null when the trace keeps message counts only.
``control_overhead``, ``load``
    non-payload messages sent per node per second of the run; messages in + out per node,
    summarized per run as max, mean and Gini coefficient.
``degree``, ``diameter``
    of the overlay in each snapshot: per (time, topic), the undirected graph whose edges are
    every neighbour reference between two nodes of the snapshot, over all layers but those a
    stack's spec declares ``non_overlay_layers`` (e.g. a supervisor's database of the ring).
``convergence_time``
    the first check time from which the stack's legitimacy predicate holds at every later
    check; null when it does not hold at the last one.
``supervisor_messages`` (:func:`event_metrics`), ``config_requests``
    messages the supervisor sent per subscribe and per unsubscribe (its ``supervisor.*``
    trace events); ConfigurationRequest messages sent after convergence per subscriber per
    timeout interval.

Filters (content-based stacks) are JSON objects, a conjunction of constraints on attributes:
``{"price": {"lt": 10}, "symbol": "ACME"}``: a bare value means equality; an object holds
operators ``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge``, ``prefix`` and ``in`` (a list). Values
compare as numbers when both sides are numbers, else as strings. ``{}`` matches everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

INFINITY = float("inf")
PERCENTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
#: the quantiles the report's latency CDF is drawn at
CDF_POINTS = [i / 100 for i in range(101)]


@dataclass(frozen=True)
class Trace:
    """The tables of one or more runs, as DataFrames (empty ones where a table is absent)."""

    runs: DataFrame
    nodes: DataFrame
    subscriptions: DataFrame
    publications: DataFrame
    deliveries: DataFrame
    messages: DataFrame
    message_counts: DataFrame
    snapshots: DataFrame
    checks: DataFrame
    faults: DataFrame
    events: DataFrame


# --------------------------------------------------------------------------------------------
# Intervals: who is alive and subscribed when
# --------------------------------------------------------------------------------------------
def life_intervals(nodes: DataFrame) -> DataFrame:
    """(run_id, node, t_up, t_down): each stretch a node ran, from an ``up`` or ``recover``
    event to its next event of any kind (crash, leave), or +inf."""
    order = Window.partitionBy("run_id", "node").orderBy("t", "event")
    return (
        nodes.withColumn("t_next", F.lead("t").over(order))
        .where(F.col("event").isin("up", "recover"))
        .select(
            "run_id",
            "node",
            F.col("t").alias("t_up"),
            F.coalesce("t_next", F.lit(INFINITY)).alias("t_down"),
        )
    )


def _constraints(subscriptions: DataFrame) -> DataFrame:
    """One row per (filter subscription, attribute constraint): (sub_key.., attr, op, value)."""
    map_type = T.MapType(T.StringType(), T.StringType())
    exploded = subscriptions.select(
        "run_id",
        "node",
        "topic",
        "t_start",
        "t_end",
        "filter",
        F.explode(F.from_json("filter", map_type)).alias("attr", "constraint"),
    )
    is_object = F.col("constraint").startswith("{")
    with_ops = exploded.select(
        "*",
        F.when(is_object, F.from_json("constraint", map_type)).alias("ops"),
    )
    scalar = with_ops.where(~is_object).select(
        "run_id", "node", "topic", "t_start", "t_end", "filter", "attr",
        F.lit("eq").alias("op"), F.col("constraint").alias("value"),
    )  # fmt: skip
    operators = with_ops.where(is_object).select(
        "run_id", "node", "topic", "t_start", "t_end", "filter", "attr",
        F.explode("ops").alias("op", "value"),
    )  # fmt: skip
    return scalar.unionByName(operators)


def _satisfied(op: Column, value: Column, actual: Column) -> Column:
    """Does attribute value ``actual`` satisfy ``op value``? (numbers as numbers)"""
    a_num, v_num = actual.try_cast("double"), value.try_cast("double")
    numeric = a_num.isNotNull() & v_num.isNotNull()

    def cmp(name: str) -> Column:
        ops = {
            "lt": (a_num < v_num, actual < value),
            "le": (a_num <= v_num, actual <= value),
            "gt": (a_num > v_num, actual > value),
            "ge": (a_num >= v_num, actual >= value),
            "eq": (a_num == v_num, actual == value),
            "ne": (a_num != v_num, actual != value),
        }
        as_number, as_string = ops[name]
        return F.when(numeric, as_number).otherwise(as_string)

    listed = F.from_json(value, T.ArrayType(T.StringType()))
    in_list = F.exists(
        listed,
        lambda x: F.when(
            x.try_cast("double").isNotNull() & a_num.isNotNull(), x.try_cast("double") == a_num
        ).otherwise(x == actual),
    )
    return (
        F.when(op == "prefix", actual.startswith(value))
        .when(op == "in", F.coalesce(in_list, F.lit(False)))
        .when(op.isin("lt", "le", "gt", "ge", "eq", "ne"), F.coalesce(
            F.when(op == "lt", cmp("lt")).when(op == "le", cmp("le")).when(op == "gt", cmp("gt"))
            .when(op == "ge", cmp("ge")).when(op == "eq", cmp("eq")).otherwise(cmp("ne")),
            F.lit(False),
        ))
        .otherwise(F.lit(False))
    )  # fmt: skip


def matching_subscriptions(
    publications: DataFrame, subscriptions: DataFrame, *, content_based: bool = True
) -> DataFrame:
    """Every (publication, subscription) whose topic or filter matches, regardless of time:
    (run_id, pub_id, t, node, t_start, t_end). Without ``content_based`` the filter half of
    the plan is left out (no subscription has a filter)."""
    pubs = publications.select(
        "run_id", "pub_id", F.col("t"), F.col("topic").alias("pub_topic"), "attributes"
    )
    sub_cols = ["run_id", "node", "topic", "t_start", "t_end"]
    out_cols = ["run_id", "pub_id", "t", "node", "t_start", "t_end"]
    by_topic = (
        subscriptions.where(F.col("filter").isNull())
        .select(*sub_cols)
        .join(pubs, ["run_id"])
        .where(F.col("topic") == F.col("pub_topic"))
        .select(*out_cols)
    )
    if not content_based:
        return by_topic
    with_filter = subscriptions.where(F.col("filter").isNotNull()).select(*sub_cols, "filter")
    topic_ok = F.col("topic").isNull() | (F.col("topic") == F.col("pub_topic"))
    sub_key = ["run_id", "node", "topic", "t_start", "t_end"]
    # constraints per subscription, by a window (a join on these keys would drop null topics
    # and open-ended subscriptions, since null = null is not true)
    constraints = _constraints(with_filter).withColumn(
        "k", F.count("*").over(Window.partitionBy(*sub_key, "filter"))
    )
    empty = (
        with_filter.where(F.size(F.from_json("filter", T.MapType(T.StringType(), T.StringType())))
                          == 0)
        .select(*sub_cols).join(pubs, ["run_id"]).where(topic_ok).select(*out_cols)
    )  # fmt: skip
    attrs = pubs.select(
        "run_id", "pub_id", "t", "pub_topic",
        F.explode(F.from_json("attributes", T.MapType(T.StringType(), T.StringType())))
        .alias("attr", "actual"),
    )  # fmt: skip
    hits = (
        constraints.join(attrs, ["run_id", "attr"])
        .where(topic_ok & _satisfied(F.col("op"), F.col("value"), F.col("actual")))
        .groupBy(*sub_key, "filter", "k", "pub_id", "t")
        .agg(F.count("*").alias("satisfied"))
        .where(F.col("satisfied") == F.col("k"))
        .select(*out_cols)
    )
    return by_topic.unionByName(empty).unionByName(hits)


def expected_pairs(
    publications: DataFrame,
    subscriptions: DataFrame,
    nodes: DataFrame,
    runs: DataFrame,
    *,
    history: bool = False,
    content_based: bool = True,
) -> DataFrame:
    """(run_id, pub_id, node): the (publication, subscriber) pairs ``reliability`` expects.

    Expected: subscription and life both cover [publish time, end of the observation window].
    With ``history`` (``history_reliability``): subscription and life cover the end of the
    window, and every matching publication counts, whenever it was issued."""
    # runs are tiny (a row per run): broadcast them rather than shuffle the candidate pairs by
    # run_id alone (one task per run). The life intervals and subscriptions grow with the
    # nodes (10^6 in a warm run): adaptive execution broadcasts them when they are measured
    # small, and no hint forces a broadcast that could run the driver out of memory.
    start = F.col("t_window_end") if history else F.col("t")
    if not content_based:
        return _by_publication(_expected_by_topic(publications, subscriptions, nodes, runs, start))
    window = F.broadcast(runs.select("run_id", F.col("duration").alias("t_window_end")))
    life = life_intervals(nodes)
    candidates = matching_subscriptions(
        publications, subscriptions, content_based=content_based
    ).join(window, ["run_id"])
    subscribed = (F.col("t_start") <= start) & (
        F.col("t_end").isNull() | (F.col("t_end") >= F.col("t_window_end"))
    )
    alive = (F.col("t_up") <= start) & (F.col("t_down") >= F.col("t_window_end"))
    return _by_publication(
        candidates.where(subscribed).join(life, ["run_id", "node"]).where(alive), distinct=True
    )


def subscribed_since(subscriptions: DataFrame, nodes: DataFrame, runs: DataFrame) -> DataFrame:
    """(run_id, topic, node, since) for the subscriptions without a filter: the earliest time
    from which one subscription of the node to the topic and one life interval of the node both
    cover it to the end of the observation window; no row where none does.

    Whether a (publication, node) pair is expected splits into a part that does not depend on
    the publication (the subscription and the life run to the end of the window) and one that
    does (both began by its publish time). This is the first part, reduced on the small tables:
    a publication on the topic expects the node exactly when it is issued at or after
    ``since``."""
    window = F.broadcast(runs.select("run_id", F.col("duration").alias("t_window_end")))
    return (
        subscriptions.where(F.col("filter").isNull() & F.col("topic").isNotNull())
        .select("run_id", "node", "topic", "t_start", "t_end")
        .join(window, ["run_id"])
        .where(F.col("t_end").isNull() | (F.col("t_end") >= F.col("t_window_end")))
        .join(life_intervals(nodes), ["run_id", "node"])
        .where(F.col("t_down") >= F.col("t_window_end"))
        .groupBy("run_id", "topic", "node")
        .agg(F.min(F.greatest("t_start", "t_up")).alias("since"))
    )


def _expected_by_topic(
    publications: DataFrame, subscriptions: DataFrame, nodes: DataFrame, runs: DataFrame,
    start: Column,
) -> DataFrame:  # fmt: skip
    """:func:`expected_pairs` when no subscription has a filter, without a distinct: each
    (publication, node) comes out once, from a join of the publications with
    :func:`subscribed_since` (one row per (node, topic) at most)."""
    since = subscribed_since(subscriptions, nodes, runs)
    window = F.broadcast(runs.select("run_id", F.col("duration").alias("t_window_end")))
    return (
        publications.select("run_id", "pub_id", "topic", "t")
        .join(window, ["run_id"])
        .join(since, ["run_id", "topic"])
        .where(F.col("since") <= start)
    )


def expected_counts_by_topic(publications: DataFrame, since: DataFrame) -> DataFrame:
    """(run_id, pub_id, expected): how many pairs each publication expects, when no
    subscription has a filter, without making the pairs: per (run, topic), the
    :func:`subscribed_since` times and the publish times in one order (a ``since`` before a
    publication at the same time, as ``since <= t`` counts it), each publication counting the
    ``since`` rows before it. A sort of nodes × topics + publications rows, where the pairs
    are publications × subscribers."""
    events = since.select(
        "run_id", "topic", F.col("since").alias("_at"), F.lit(0).alias("_kind"),
        F.lit(None).cast("long").alias("pub_id"),
    ).unionByName(
        publications.select(
            "run_id", "topic", F.col("t").alias("_at"), F.lit(1).alias("_kind"), "pub_id"
        )
    )  # fmt: skip
    before = (
        Window.partitionBy("run_id", "topic")
        .orderBy("_at", "_kind")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return (
        events.withColumn("expected", F.sum(1 - F.col("_kind")).over(before))
        .where(F.col("_kind") == 1)
        .select("run_id", "pub_id", F.col("expected").cast("long").alias("expected"))
    )


def _by_publication(pairs: DataFrame, *, distinct: bool = False) -> DataFrame:
    """(run_id, pub_id, node) of ``pairs``, partitioned by publication like
    :func:`first_deliveries` (:func:`per_publication` joins the two and aggregates per
    publication without another shuffle); pub_id first in every key: a numeric sort prefix
    (run_id is the same string on every row of a run)."""
    out = pairs.select("pub_id", "node", "run_id").repartition("pub_id", "run_id")
    return (out.distinct() if distinct else out).select("run_id", "pub_id", "node")


# --------------------------------------------------------------------------------------------
# Deliveries and messages
# --------------------------------------------------------------------------------------------
def first_deliveries(deliveries: DataFrame, publications: DataFrame) -> DataFrame:
    """(run_id, pub_id, node, t, hops, copies, latency, topic, t_publish): the first delivery of
    each (publication, node), how many times it was delivered there, and the publication's
    topic and publish time (what :func:`per_publication` needs of it).

    ``hops`` is the fewest hops among the deliveries at the first time (the (t, hops) order)."""
    # partitioned by publication once (per_publication aggregates per publication without
    # another shuffle), pub_id first in the keys (a numeric sort prefix; run_id is one string
    # per run). Two hash aggregates instead of one over (t, hops) structs, which Spark can only
    # sort-aggregate: per (publication, node, time) the fewest hops and the copies, then per
    # (publication, node) the earliest time and its hops (min_by over the time alone is exact:
    # every time appears once by then)
    publish = publications.select("run_id", "pub_id", "topic", F.col("t").alias("t_publish"))
    per_time = (
        deliveries.repartition("pub_id", "run_id")
        .groupBy("pub_id", "node", "run_id", "t")
        .agg(F.min("hops").alias("hops"), F.count("*").alias("copies"))
    )
    return (
        per_time.groupBy("pub_id", "node", "run_id")
        .agg(
            F.min("t").alias("t"),
            F.min_by("hops", "t").alias("hops"),
            F.sum("copies").alias("copies"),
        )
        .join(publish, ["pub_id", "run_id"])
        .select(
            "run_id", "pub_id", "node", "t", "hops", "copies",
            (F.col("t") - F.col("t_publish")).alias("latency"), "topic", "t_publish",
        )
    )  # fmt: skip


def payload_messages(messages: DataFrame, deliveries: DataFrame) -> DataFrame:
    """(run_id, pub_id, payload_messages, payload_received, false_positives) from a full
    message trace: payload messages sent, those received, and those received at a node that
    neither delivered the publication nor sent a payload message for it (module doc), in one
    pass over the messages."""
    payload = messages.where(F.col("payload") & F.col("pub_id").isNotNull()).select(
        "run_id", "pub_id", "src", F.col("dst").alias("node"), "t_recv"
    )
    used = (
        deliveries.select("run_id", "pub_id", "node")
        .unionByName(payload.select("run_id", "pub_id", F.col("src").alias("node")))
        .distinct()
        .withColumn("_used", F.lit(True))
    )
    received = F.col("t_recv").isNotNull()
    return (
        payload.join(used, ["run_id", "pub_id", "node"], "left")
        .groupBy("run_id", "pub_id")
        .agg(
            F.count("*").alias("payload_messages"),
            F.count(F.when(received, 1)).alias("payload_received"),
            F.count(F.when(received & F.col("_used").isNull(), 1)).alias("false_positives"),
        )
    )


def _percentiles(column: str) -> list[Column]:
    return [F.percentile(column, q).alias(f"latency_{name}") for name, q in PERCENTILES] + [
        F.max(column).alias("latency_max")
    ]


def _ranks(n: Column, q: float) -> tuple[Column, Column]:
    """0-based ranks below and above percentile ``q`` of ``n`` sorted values (as Spark's
    ``percentile``: position (n - 1)·q, its floor and ceiling)."""
    position = (n - 1) * F.lit(q)
    return F.floor(position), F.ceil(position)


def _interpolate(n: Column, q: float, low_value: Column, high_value: Column) -> Column:
    """Percentile ``q`` from the values at its two ranks, computed as Spark's ``percentile``
    does (the same double operations, so the same bits): null without values."""
    position = (n - 1) * F.lit(q)
    low, high = _ranks(n, q)
    return (
        F.when(n == 0, F.lit(None).cast("double"))
        .when((high == low) | (low_value == high_value), low_value)
        .otherwise((high - position) * low_value + (position - low) * high_value)
    )


def per_publication(
    trace: Trace, first: DataFrame, *, content_based: bool = True, small_since: bool = False
) -> DataFrame:
    """One row per publication: expected, delivered, reliability, receivers, duplicates,
    latency p50/p95/p99/max, hops_mean, ldh, payload_messages, rmr, false_positives,
    payload_received.

    ``first`` is :func:`first_deliveries`. Without ``content_based`` (no subscription has a
    filter) the expected pairs are never made: each first delivery learns whether it was
    expected from :func:`subscribed_since`, and :func:`expected_counts_by_topic` counts the
    expected pairs; ``small_since`` broadcasts the ``since`` table to the first deliveries
    (the caller knows it is small: nodes × topics rows), so they stay where they are."""
    pubs = trace.publications
    keys = ["pub_id", "node", "run_id"]
    got_rows = first.withColumn("_got", F.lit(True))
    counts = None
    if content_based:
        # the pairs and the first deliveries are both partitioned by publication: one full
        # outer join (both distinct on the pair) marks each pair expected, delivered or both,
        # and the aggregate below counts them, the expected pairs read once. The join's keys
        # come from either side, so Spark does not know its output partitioned and shuffles
        # it once more for the aggregate
        pairs = expected_pairs(
            pubs, trace.subscriptions, trace.nodes, trace.runs, content_based=True
        )
        rows = got_rows.join(pairs.select(*keys, F.lit(True).alias("_expected")), keys, "full")
    else:
        since = subscribed_since(trace.subscriptions, trace.nodes, trace.runs)
        lookup = F.broadcast(since) if small_since else since
        rows = got_rows.join(lookup, ["run_id", "topic", "node"], "left").withColumn(
            "_expected", F.when(F.col("since") <= F.col("t_publish"), F.lit(True))
        )
        counts = expected_counts_by_topic(pubs, since)
    # one aggregate per publication; exact percentiles from each publication's latencies
    # sorted (Spark's `percentile` keeps a map of values per group and merges them slowly);
    # the last delivery hop is the hops of the greatest (t, hops) among the first deliveries
    got = rows.groupBy("pub_id", "run_id").agg(
        F.count("_expected").alias("_expected_rows"),
        F.count("_got").alias("receivers"),
        F.count(F.when(F.col("_got") & F.col("_expected"), 1)).alias("delivered"),
        F.sum(F.col("copies") - 1).alias("duplicates"),
        F.array_sort(F.collect_list("latency")).alias("_latencies"),
        F.max("latency").alias("latency_max"),
        F.avg("hops").alias("hops_mean"),
        F.array_max(F.collect_list(F.when(F.col("_got"), F.struct("t", "hops")))).alias("_last"),
    )
    n = F.size("_latencies")
    percentiles = []
    for name, q in PERCENTILES:
        low, high = _ranks(n, q)
        percentiles.append(
            _interpolate(
                n, q, F.get("_latencies", low.cast("int")), F.get("_latencies", high.cast("int"))
            ).alias(f"latency_{name}")
        )
    # general: the pairs counted in the aggregate; by topic: counted apart, joined here
    expected = [F.col("_expected_rows").alias("expected")] if counts is None else []
    got = got.select(
        "run_id", "pub_id", *expected, "delivered", "receivers", "duplicates", *percentiles,
        "latency_max", "hops_mean", F.col("_last.hops").alias("ldh"),
    )  # fmt: skip
    if counts is not None:
        got = got.join(counts, ["run_id", "pub_id"], "full")
    payload = payload_messages(trace.messages, trace.deliveries)
    full = trace.runs.where(F.col("messages_mode") == "full").select("run_id")
    out = (
        pubs.select("run_id", "pub_id", "publisher", "topic", "t")
        # one row per publication from here: a shuffle of these few rows ends the heavy stage,
        # which then runs once (an orderBy on the result samples the stage before its sort)
        .join(got.repartition("run_id", "pub_id"), ["run_id", "pub_id"], "left")
        .join(payload, ["run_id", "pub_id"], "left")
        .join(F.broadcast(full.withColumn("_full", F.lit(True))), ["run_id"], "left")
        .fillna(0, ["expected", "delivered", "receivers", "duplicates"])
    )

    def full_only(column: str) -> Column:
        return F.when(F.col("_full"), F.coalesce(column, F.lit(0)))

    return (
        out.withColumn("payload_messages", full_only("payload_messages"))
        .withColumn("false_positives", full_only("false_positives"))
        .withColumn("payload_received", full_only("payload_received"))
        .withColumn(
            "reliability",
            F.when(F.col("expected") > 0, F.col("delivered") / F.col("expected")),
        )
        .withColumn(
            "rmr",
            F.when(
                (F.col("receivers") >= 2) & F.col("payload_messages").isNotNull(),
                F.col("payload_messages") / (F.col("receivers") - 1) - 1,
            ),
        )
        .select(
            "run_id", "pub_id", "publisher", "topic", "t", "expected", "delivered",
            "reliability", "receivers", "duplicates", "latency_p50", "latency_p95",
            "latency_p99", "latency_max", "hops_mean", "ldh", "payload_messages", "rmr",
            "false_positives", "payload_received",
        )
    )  # fmt: skip


def order_violations(first: DataFrame, publications: DataFrame) -> DataFrame:
    """(run_id, order_violations): first deliveries at a node of a publication issued before
    (publish time, then id) one from the same publisher already delivered there. ``first`` is
    :func:`first_deliveries` (computed once for every metric that reads it: no second
    aggregation of the raw deliveries)."""
    keyed = (
        first.select("run_id", "pub_id", "node", F.col("t").alias("t_deliver"), "t_publish")
        .join(publications.select("run_id", "pub_id", "publisher"), ["run_id", "pub_id"])
        .withColumn("issue_order", F.struct("t_publish", "pub_id"))
    )
    seen = (
        Window.partitionBy("run_id", "node", "publisher")
        .orderBy("t_deliver", "pub_id")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    return (
        keyed.withColumn("latest_before", F.max("issue_order").over(seen))
        .where(F.col("issue_order") < F.col("latest_before"))
        .groupBy("run_id")
        .agg(F.count("*").alias("order_violations"))
    )


def message_totals(trace: Trace) -> DataFrame:
    """(run_id, node, type, layer, payload, sent, received, bytes_sent) from whichever of
    ``messages`` (full) and ``message_counts`` (counts) the run keeps."""
    keys = ["run_id", "node", "type", "layer", "payload"]
    # two aggregates over the messages, by sender and by receiver, each reduced where it is
    # read (the partial aggregates are nodes × types rows); one pass that counted each message
    # at both ends (inline of an array of two structs per message) cost more than two scans
    zero = F.lit(0).cast("long")
    by_src = trace.messages.groupBy(
        "run_id", F.col("src").alias("node"), "type", "layer", "payload"
    ).agg(
        F.count("*").alias("sent"),
        zero.alias("received"),
        F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes_sent"),
    )
    by_dst = (
        trace.messages.where(F.col("t_recv").isNotNull())
        .groupBy("run_id", F.col("dst").alias("node"), "type", "layer", "payload")
        .agg(zero.alias("sent"), F.count("*").alias("received"), zero.alias("bytes_sent"))
    )
    full = by_src.unionByName(by_dst)
    counted = trace.message_counts.groupBy(*keys).agg(
        F.sum("sent").alias("sent"),
        F.sum("received").alias("received"),
        F.sum("bytes_sent").alias("bytes_sent"),
    )
    return (
        full.unionByName(counted)
        .groupBy(*keys)
        .agg(
            F.sum("sent").alias("sent"),
            F.sum("received").alias("received"),
            F.sum("bytes_sent").alias("bytes_sent"),
        )
    )


def messages_per_second(trace: Trace) -> DataFrame:
    """(run_id, second, type, layer, payload, sent): messages sent per whole second."""
    keys = ["run_id", "second", "type", "layer", "payload"]
    full = (
        trace.messages.withColumn("second", F.floor("t_send").cast("long"))
        .groupBy(*keys)
        .agg(F.count("*").alias("sent"))
    )
    counted = trace.message_counts.groupBy(*keys).agg(F.sum("sent").alias("sent"))
    return full.unionByName(counted)


def per_node(trace: Trace, message_totals: DataFrame, first: DataFrame) -> DataFrame:
    """One row per node: role, sent, received, load (in + out), payload_sent, control_sent,
    control_overhead (non-payload messages sent per second), deliveries.

    ``message_totals`` and ``first`` are :func:`message_totals` and :func:`first_deliveries`
    of the trace."""
    totals = message_totals.groupBy("run_id", "node").agg(
        F.sum("sent").alias("sent"),
        F.sum("received").alias("received"),
        F.sum(F.when(F.col("payload"), F.col("sent")).otherwise(0)).alias("payload_sent"),
        F.sum(F.when(~F.col("payload"), F.col("sent")).otherwise(0)).alias("control_sent"),
    )
    roles = trace.nodes.groupBy("run_id", "node").agg(
        F.max_by("role", F.struct("t", "event")).alias("role")
    )
    # distinct publications per node: the first deliveries, one per (publication, node),
    # counted (the deliveries themselves would need a distinct: a shuffle and a hash of each)
    delivered = first.groupBy("run_id", "node").agg(F.count("*").alias("deliveries"))
    durations = F.broadcast(trace.runs.select("run_id", "duration"))
    return (
        roles.join(totals, ["run_id", "node"], "left")
        .join(delivered, ["run_id", "node"], "left")
        .fillna(0, ["sent", "received", "payload_sent", "control_sent", "deliveries"])
        .join(durations, ["run_id"])
        .withColumn("load", F.col("sent") + F.col("received"))
        .withColumn(
            "control_overhead",
            F.when(F.col("duration") > 0, F.col("control_sent") / F.col("duration")),
        )
        .select(
            "run_id", "node", "role", "sent", "received", "load", "payload_sent",
            "control_sent", "control_overhead", "deliveries",
        )
    )  # fmt: skip


def load_summary(nodes: DataFrame) -> DataFrame:
    """(run_id, load_max, load_mean, load_gini, control_overhead) from :func:`per_node`.

    Gini = 2 Σ i·x₍ᵢ₎ / (n Σ x) − (n + 1)/n over loads sorted ascending (i from 1)."""
    ranked = nodes.withColumn(
        "rank", F.row_number().over(Window.partitionBy("run_id").orderBy("load", "node"))
    )
    return ranked.groupBy("run_id").agg(
        F.max("load").alias("load_max"),
        F.avg("load").alias("load_mean"),
        F.when(
            F.sum("load") > 0,
            2 * F.sum(F.col("rank") * F.col("load")) / (F.count("*") * F.sum("load"))
            - (F.count("*") + 1) / F.count("*"),
        )
        .otherwise(0.0)
        .alias("load_gini"),
        F.avg("control_overhead").alias("control_overhead"),
    )


# --------------------------------------------------------------------------------------------
# Overlay snapshots and self-stabilization
# --------------------------------------------------------------------------------------------
def overlay_edges(
    snapshots: DataFrame, non_overlay_layers: Sequence[str] = ()
) -> tuple[DataFrame, DataFrame]:
    """(vertices, edges) of each snapshot graph: vertices (run_id, t, topic, node) and
    undirected edges (run_id, t, topic, a, b) with a < b between two vertices, over every
    snapshot layer but ``non_overlay_layers``."""
    rows = snapshots
    if non_overlay_layers:
        rows = snapshots.where(~F.col("layer").isin(*non_overlay_layers))
    vertices = rows.select("run_id", "t", "topic", "node").distinct()
    refs = rows.select(
        "run_id", "t", "topic", "node", F.explode("neighbors").alias("neighbor")
    ).where(F.col("node") != F.col("neighbor"))
    known = vertices.select("run_id", "t", "topic", F.col("node").alias("neighbor"))
    edges = (
        refs.join(known, ["run_id", "t", "topic", "neighbor"])
        .select(
            "run_id",
            "t",
            "topic",
            F.least("node", "neighbor").alias("a"),
            F.greatest("node", "neighbor").alias("b"),
        )
        .distinct()
    )
    return vertices, edges


def node_degrees(snapshots: DataFrame, non_overlay_layers: Sequence[str] = ()) -> DataFrame:
    """(run_id, t, topic, node, degree) for every vertex of every snapshot graph."""
    return degrees_of(*overlay_edges(snapshots, non_overlay_layers))


def degrees_of(vertices: DataFrame, edges: DataFrame) -> DataFrame:
    """:func:`node_degrees` from :func:`overlay_edges`'s vertices and edges."""
    ends = edges.select("run_id", "t", "topic", F.col("a").alias("node")).unionByName(
        edges.select("run_id", "t", "topic", F.col("b").alias("node"))
    )
    counts = ends.groupBy("run_id", "t", "topic", "node").agg(F.count("*").alias("degree"))
    return vertices.join(counts, ["run_id", "t", "topic", "node"], "left").fillna(0, ["degree"])


DIAMETER_TYPE = T.StructType(
    [
        T.StructField("diameter", T.LongType()),
        T.StructField("connected", T.BooleanType()),
        T.StructField("diameter_exact", T.BooleanType()),
    ]
)
#: Above this many vertices a snapshot's diameter is the best of a few double sweeps (a lower
#: bound, flagged ``diameter_exact = false``) instead of a BFS from every vertex.
EXACT_DIAMETER_MAX = 1500


def _diameters(vertices: pd.Series, ends_a: pd.Series, ends_b: pd.Series) -> pd.DataFrame:
    """Vectorized UDF body: one snapshot graph a row (vertex list, edge end lists)."""
    from pubmesh.analysis.graph import diameter

    out = []
    for vs, a, b in zip(vertices, ends_a, ends_b, strict=True):
        edges = [] if a is None else list(zip(a.tolist(), b.tolist(), strict=True))
        value, connected, exact = diameter(vs.tolist(), edges, exact_limit=EXACT_DIAMETER_MAX)
        out.append((value, connected, exact))
    return pd.DataFrame(out, columns=["diameter", "connected", "diameter_exact"])


def overlay_over_time(snapshots: DataFrame, non_overlay_layers: Sequence[str] = ()) -> DataFrame:
    """(run_id, t, topic, nodes, edges, degree_max, degree_mean, diameter, connected,
    diameter_exact) per snapshot graph; diameter is null when the graph is disconnected.

    Degrees are Spark aggregates; the diameter is a BFS per graph in a vectorized Python UDF
    (each call gets a batch of whole graphs as vertex and edge lists)."""
    vertices, edges = overlay_edges(snapshots, non_overlay_layers)
    return overlay_of(edges, degrees_of(vertices, edges))


def overlay_of(edges: DataFrame, degrees: DataFrame) -> DataFrame:
    """:func:`overlay_over_time` from :func:`overlay_edges`'s edges and their
    :func:`degrees_of` (the analysis computes both once: the degree histogram reads them
    too)."""
    from pyspark.sql.pandas.functions import pandas_udf

    stats = degrees.groupBy("run_id", "t", "topic").agg(
        F.count("*").alias("nodes"),
        (F.sum("degree") / 2).cast("long").alias("edges"),
        F.max("degree").alias("degree_max"),
        F.avg("degree").alias("degree_mean"),
        F.collect_list("node").alias("vertex_list"),
    )
    edge_lists = edges.groupBy("run_id", "t", "topic").agg(
        F.collect_list("a").alias("ends_a"), F.collect_list("b").alias("ends_b")
    )
    measure = pandas_udf(_diameters, DIAMETER_TYPE)  # type: ignore[call-overload]
    return (
        stats.join(edge_lists, ["run_id", "t", "topic"], "left")
        .withColumn("g", measure("vertex_list", "ends_a", "ends_b"))
        .select(
            "run_id", "t", "topic", "nodes", "edges", "degree_max", "degree_mean",
            "g.diameter", "g.connected", "g.diameter_exact",
        )
    )  # fmt: skip


def at_last_snapshot(rows: DataFrame) -> DataFrame:
    """The rows of ``rows`` (with run_id and t) taken at each run's last snapshot time."""
    last = rows.groupBy("run_id").agg(F.max("t").alias("t"))
    return rows.join(last, ["run_id", "t"])


def overlay_final(overlay: DataFrame) -> DataFrame:
    """(run_id, degree_max, degree_mean, diameter) at each run's last snapshot (max over
    topics; degree_mean weighted by vertices)."""
    return (
        at_last_snapshot(overlay)
        .groupBy("run_id")
        .agg(
            F.max("degree_max").alias("degree_max"),
            (F.sum(F.col("degree_mean") * F.col("nodes")) / F.sum("nodes")).alias("degree_mean"),
            F.max("diameter").alias("diameter"),
        )
    )


def edge_filters(snapshots: DataFrame) -> DataFrame:
    """(run_id, filter_conjunctions_mean, filter_conjunctions_max): the routing-table size of
    a content-based stack at each run's last snapshot, over every edge of every node whose
    snapshot state has ``filters`` (subscription conjunctions per out-edge; Terpstra et al. §2.1
    compares the routing modes on it). Runs without such snapshots have no row."""
    sizes = snapshots.select(
        "run_id",
        "t",
        F.explode(F.from_json(F.get_json_object("state", "$.filters"), "map<string,long>")).alias(
            "edge", "conjunctions"
        ),
    )
    return (
        at_last_snapshot(sizes)
        .groupBy("run_id")
        .agg(
            F.avg("conjunctions").alias("filter_conjunctions_mean"),
            F.max("conjunctions").alias("filter_conjunctions_max"),
        )
    )


def convergence_time(checks: DataFrame) -> DataFrame:
    """(run_id, convergence_time): the first check time from which every predicate holds at
    every later check; null if one fails at the last check."""
    per_time = checks.groupBy("run_id", "t").agg(F.min(F.col("value").cast("int")).alias("ok"))
    last_bad = per_time.groupBy("run_id").agg(
        F.max(F.when(F.col("ok") == 0, F.col("t"))).alias("t_bad"),
        F.max("t").alias("t_last"),
    )
    return (
        per_time.join(last_bad, ["run_id"])
        .where((F.col("ok") == 1) & (F.col("t_bad").isNull() | (F.col("t") > F.col("t_bad"))))
        .groupBy("run_id")
        .agg(F.min("t").alias("convergence_time"))
        .join(last_bad.select("run_id"), ["run_id"], "right")
    )


#: protocol events counted per run (brokertree's, Kazemzadeh & Jacobsen;
#: docs/protocols/brokertree.md §11): copies held back because they would break legitimacy,
#: publications tagged as delivered through an overlap while a subscription was partial, and copies
#: the per-publisher safety net dropped
EVENT_COUNTS = (
    ("stalls", "brokertree.stalled"),
    ("tagged", "brokertree.tagged"),
    ("safety_drops", "brokertree.late"),
)


def event_metrics(events: DataFrame) -> DataFrame:
    """(run_id, supervisor_messages_per_subscribe, supervisor_messages_per_unsubscribe,
    stalls, tagged, safety_drops, replayed) from the events table, in one pass.

    The supervisor means are the mean of ``detail.messages`` over the supervisor's
    ``supervisor.subscribe`` and ``supervisor.unsubscribe`` trace events (Feldmann et al.
    §3.1: 1 and 2), null for a run without such events; the counts are how many events of
    each kind of :data:`EVENT_COUNTS` a run has, null for a run with none of those kinds;
    ``replayed`` counts the ``history.replayed`` events (publications handed to a late
    subscriber from the topic's history), null for a run without any. A run with none of these
    has no row."""
    counted = [kind for _, kind in EVENT_COUNTS]
    sent = F.get_json_object("detail", "$.messages").cast("double")
    any_counted = F.sum(F.col("kind").isin(counted).cast("long")) > 0
    return (
        events.where(
            F.col("kind").isin(
                "supervisor.subscribe", "supervisor.unsubscribe", "history.replayed", *counted
            )
        )
        .groupBy("run_id")
        .agg(
            F.avg(F.when(F.col("kind") == "supervisor.subscribe", sent)).alias(
                "supervisor_messages_per_subscribe"
            ),
            F.avg(F.when(F.col("kind") == "supervisor.unsubscribe", sent)).alias(
                "supervisor_messages_per_unsubscribe"
            ),
            *(
                F.when(any_counted, F.sum(F.when(F.col("kind") == kind, 1).otherwise(0)))
                .cast("long")
                .alias(name)
                for name, kind in EVENT_COUNTS
            ),
            F.sum(F.when(F.col("kind") == "history.replayed", 1)).cast("long").alias("replayed"),
        )
    )


def config_requests(
    trace: Trace, convergence: DataFrame, timeout_intervals: DataFrame
) -> DataFrame:
    """(run_id, config_requests): ConfigurationRequest messages sent at or after convergence,
    per topic (one BuildSR instance each) per timeout interval from convergence to the end.

    Feldmann et al. §3.2.1 and docs/protocols/skipring.md §5: with p(k) = 4^-k the whole ring of a
    topic sends fewer than 3/4 requests per timeout interval in expectation, whatever n; the claim
    is per ring, so this is not divided by the number of subscribers. ``timeout_intervals`` is
    (run_id, timeout_interval), read from each run's scenario."""
    full = trace.messages.where(F.col("type") == "ConfigurationRequest").select(
        "run_id", F.col("t_send").alias("t"), F.lit(1).cast("long").alias("n")
    )
    counted = trace.message_counts.where(F.col("type") == "ConfigurationRequest").select(
        "run_id", F.col("second").cast("double").alias("t"), F.col("sent").alias("n")
    )
    requests = full.unionByName(counted)
    topics = (
        trace.subscriptions.where(F.col("t_end").isNull())
        .groupBy("run_id")
        .agg(F.countDistinct("topic").alias("topics"))
    )
    after = (
        requests.join(convergence, ["run_id"])
        .where(F.col("t") >= F.col("convergence_time"))
        .groupBy("run_id")
        .agg(F.sum("n").alias("requests"))
    )
    intervals = (F.col("duration") - F.col("convergence_time")) / F.col("timeout_interval")
    return (
        convergence.where(F.col("convergence_time").isNotNull())
        .join(timeout_intervals, ["run_id"])
        .join(trace.runs.select("run_id", "duration"), ["run_id"])
        .join(topics, ["run_id"])
        .join(after, ["run_id"], "left")
        .fillna(0, ["requests"])
        .where((intervals > 0) & (F.col("topics") > 0))
        .select(
            "run_id",
            (F.col("requests") / (F.col("topics") * intervals)).alias("config_requests"),
        )
    )


# --------------------------------------------------------------------------------------------
# Per run
# --------------------------------------------------------------------------------------------
def history_reliability(trace: Trace, *, content_based: bool = True) -> DataFrame:
    """(run_id, history_reliability) — see the module docstring."""
    wanted = expected_pairs(
        trace.publications,
        trace.subscriptions,
        trace.nodes,
        trace.runs,
        history=True,
        content_based=content_based,
    )
    got = trace.deliveries.select("run_id", "pub_id", "node").distinct()
    return (
        wanted.join(got.withColumn("hit", F.lit(1)), ["run_id", "pub_id", "node"], "left")
        .groupBy("run_id")
        .agg((F.count("hit") / F.count("*")).alias("history_reliability"))
    )


def per_run(
    trace: Trace,
    *,
    publications: DataFrame,
    nodes: DataFrame,
    overlay: DataFrame,
    first: DataFrame,
    message_totals: DataFrame,
    convergence: DataFrame,
    history: DataFrame,
    config: DataFrame,
) -> DataFrame:
    """One row per run with every run-level metric of docs/design.md, from the outputs of
    :func:`per_publication`, :func:`per_node`, :func:`overlay_over_time`,
    :func:`first_deliveries`, :func:`message_totals`, :func:`convergence_time`,
    :func:`history_reliability` and :func:`config_requests` (each computed once)."""
    # the later half by publish time (rmr_late, ldh_late) from the same pass: one shuffle of
    # the publications by run for the rank and every aggregate, not one each
    order = Window.partitionBy("run_id").orderBy("t", "pub_id")
    late = F.col("_rank") > F.floor(F.col("_count") / 2)
    ranked = publications.withColumn("_rank", F.row_number().over(order)).withColumn(
        "_count", F.count("*").over(Window.partitionBy("run_id"))
    )
    pubs = ranked.groupBy("run_id").agg(
        F.count("*").alias("publications"),
        F.sum("expected").alias("expected"),
        F.sum("delivered").alias("delivered"),
        F.sum("duplicates").alias("duplicates"),
        F.avg("rmr").alias("rmr_mean"),
        F.stddev_samp("rmr").alias("rmr_std"),
        F.avg("ldh").alias("ldh_mean"),
        F.stddev_samp("ldh").alias("ldh_std"),
        F.sum("payload_messages").alias("payload_messages"),
        F.when(
            F.sum("payload_received") > 0, F.sum("false_positives") / F.sum("payload_received")
        ).alias("false_positive_rate"),
        F.avg(F.when(late, F.col("rmr"))).alias("rmr_late"),
        F.avg(F.when(late, F.col("ldh"))).alias("ldh_late"),
    )
    latency = first.groupBy("run_id").agg(*_percentiles("latency"))
    totals = message_totals.groupBy("run_id").agg(
        F.sum("sent").alias("messages"),
        F.sum(F.when(~F.col("payload"), F.col("sent")).otherwise(0)).alias("control_messages"),
    )
    runs = trace.runs.select("run_id", "stack", "runtime", "nodes", "seed", "duration")
    parts = [
        pubs, history, order_violations(first, trace.publications), latency, totals,
        load_summary(nodes), overlay_final(overlay), convergence, event_metrics(trace.events),
        config, edge_filters(trace.snapshots),
    ]  # fmt: skip
    out = runs
    for part in parts:
        # each part is one row a run, however large the trace: broadcast to the runs table,
        # so no join shuffles, and the parts' own jobs run side by side
        out = out.join(F.broadcast(part), ["run_id"], "left")
    out = out.fillna(
        0, ["publications", "expected", "delivered", "duplicates", "order_violations"]
    ).withColumn(
        "reliability",
        F.when(F.col("expected") > 0, F.col("delivered") / F.col("expected")),
    )
    return out.select(*RUN_COLUMNS)


RUN_COLUMNS = (
    "run_id", "stack", "runtime", "nodes", "seed", "duration", "publications", "expected",
    "delivered", "reliability", "history_reliability", "duplicates", "order_violations",
    "latency_p50", "latency_p95", "latency_p99", "latency_max", "rmr_mean", "rmr_std",
    "ldh_mean", "ldh_std", "rmr_late", "ldh_late", "messages", "payload_messages",
    "false_positive_rate", "control_messages",
    "control_overhead", "load_max", "load_mean", "load_gini", "degree_max", "degree_mean",
    "diameter", "convergence_time", "supervisor_messages_per_subscribe",
    "supervisor_messages_per_unsubscribe", "config_requests", "filter_conjunctions_mean",
    "filter_conjunctions_max", "stalls", "tagged", "safety_drops", "replayed",
)  # fmt: skip
