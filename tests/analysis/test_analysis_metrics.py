"""The metric functions on tiny hand-built traces whose answers are worked out by hand.

One real local Spark session (the ``spark`` fixture); results compared with
``pyspark.testing.assertDataFrameEqual`` (row order ignored, floats to 1e-5 relative).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from pubmesh.analysis import metrics
from pubmesh.analysis.graph import diameter
from pubmesh.analysis.job import BYTES_PER_PARTITION, shuffle_partitions, static_plans
from pubmesh.analysis.spark import SMALL_INPUT_BYTES
from support.tracebuild import frame, trace

INF = math.inf

# Four nodes; node 3 crashes at 6, node 4 crashes at 2 and recovers at 3. Topic "a":
# node 1 from 0, node 2 from 4 (late), node 3 from 0 until its crash, node 4 from 3.
# Node 1 is on topic "b" until 5. p1 (a, t=1), p2 (a, t=5), p3 (b, t=2).
NODES = [
    {"node": 1, "t": 0.0, "event": "up", "role": "peer"},
    {"node": 2, "t": 0.0, "event": "up", "role": "peer"},
    {"node": 3, "t": 0.0, "event": "up", "role": "peer"},
    {"node": 3, "t": 6.0, "event": "crash", "role": "peer"},
    {"node": 4, "t": 0.0, "event": "up", "role": "peer"},
    {"node": 4, "t": 2.0, "event": "crash", "role": "peer"},
    {"node": 4, "t": 3.0, "event": "recover", "role": "peer"},
]
SUBSCRIPTIONS = [
    {"node": 1, "topic": "a", "t_start": 0.0, "t_end": None},
    {"node": 2, "topic": "a", "t_start": 4.0, "t_end": None},
    {"node": 3, "topic": "a", "t_start": 0.0, "t_end": 6.0},
    {"node": 4, "topic": "a", "t_start": 3.0, "t_end": None},
    {"node": 1, "topic": "b", "t_start": 0.0, "t_end": 5.0},
]
PUBLICATIONS = [
    {"pub_id": 1, "publisher": 1, "topic": "a", "t": 1.0, "size": 10},
    {"pub_id": 2, "publisher": 2, "topic": "a", "t": 5.0, "size": 10},
    {"pub_id": 3, "publisher": 1, "topic": "b", "t": 2.0, "size": 10},
]
DELIVERIES = [
    {"pub_id": 1, "node": 1, "t": 1.0, "hops": 0},
    {"pub_id": 1, "node": 2, "t": 1.2, "hops": 1},
    {"pub_id": 1, "node": 2, "t": 1.3, "hops": 2},  # a duplicate
    {"pub_id": 2, "node": 2, "t": 5.0, "hops": 0},
    {"pub_id": 2, "node": 1, "t": 5.1, "hops": 1},
    {"pub_id": 2, "node": 3, "t": 5.2, "hops": 1},  # node 3 is not expected (crashes at 6)
]


def _msg(src: int, dst: int, type_: str, payload: bool, pub: int | None, lost: bool = False) -> Any:
    return {
        "t_send": 1.0, "t_recv": None if lost else 1.1, "src": src, "dst": dst, "type": type_,
        "layer": "broadcast", "payload": payload, "pub_id": pub, "bytes": 50,
    }  # fmt: skip


MESSAGES = [
    _msg(1, 2, "Gossip", True, 1),
    _msg(2, 3, "Gossip", True, 1),
    _msg(1, 4, "Gossip", True, 1, lost=True),
    _msg(4, 1, "Gossip", True, 1),
    _msg(3, 1, "IHave", False, None),
    _msg(2, 1, "Gossip", True, 2),
    _msg(2, 4, "Gossip", True, 2),
    _msg(2, 3, "Gossip", True, 2),
]


@pytest.fixture(scope="module")
def pubsub(spark: Any) -> metrics.Trace:
    return trace(
        spark,
        nodes=NODES,
        subscriptions=SUBSCRIPTIONS,
        publications=PUBLICATIONS,
        deliveries=DELIVERIES,
        messages=MESSAGES,
    )


def test_life_intervals_run_from_up_or_recover_to_the_next_event(spark: Any) -> None:
    got = metrics.life_intervals(frame(spark, "nodes", NODES))
    want = spark.createDataFrame(
        [("r1", 1, 0.0, INF), ("r1", 2, 0.0, INF), ("r1", 3, 0.0, 6.0), ("r1", 4, 0.0, 2.0),
         ("r1", 4, 3.0, INF)],
        "run_id string, node long, t_up double, t_down double",
    )  # fmt: skip
    assertDataFrameEqual(got, want)


@pytest.mark.parametrize("content_based", [True, False], ids=["general", "by-topic"])
def test_expected_pairs_need_subscription_and_life_from_publish_to_window_end(
    spark: Any, pubsub: metrics.Trace, content_based: bool
) -> None:
    got = metrics.expected_pairs(
        pubsub.publications,
        pubsub.subscriptions,
        pubsub.nodes,
        pubsub.runs,
        content_based=content_based,
    )
    # p1: only node 1 (2 subscribed late, 3 crashes, 4 was down at t=1); p2: 1, 2 and 4;
    # p3: nobody (node 1 unsubscribed from b before the end of the window)
    want = spark.createDataFrame(
        [("r1", 1, 1), ("r1", 2, 1), ("r1", 2, 2), ("r1", 2, 4)],
        "run_id string, pub_id long, node long",
    )
    assertDataFrameEqual(got, want)


@pytest.mark.parametrize("content_based", [True, False], ids=["general", "by-topic"])
def test_history_pairs_count_every_publication_for_subscribers_alive_at_the_end(
    spark: Any, pubsub: metrics.Trace, content_based: bool
) -> None:
    got = metrics.expected_pairs(
        pubsub.publications,
        pubsub.subscriptions,
        pubsub.nodes,
        pubsub.runs,
        history=True,
        content_based=content_based,
    )
    want = spark.createDataFrame(
        [("r1", p, n) for p in (1, 2) for n in (1, 2, 4)], "run_id string, pub_id long, node long"
    )
    assertDataFrameEqual(got, want)
    assertDataFrameEqual(
        metrics.history_reliability(pubsub),
        spark.createDataFrame([("r1", 4 / 6)], "run_id string, history_reliability double"),
    )


@pytest.mark.parametrize(
    "pairs_of",
    [
        pytest.param({"content_based": True}, id="twice-subscribed"),
        pytest.param({"content_based": False}, id="twice-subscribed-by-topic"),
    ],
)
def test_a_node_subscribed_twice_and_alive_twice_is_one_expected_pair(
    spark: Any, pairs_of: dict[str, bool]
) -> None:
    # node 1: two overlapping subscriptions to "a" (the later one from 2), up at 0, down at 1,
    # back at 1.5; node 2 joins "a" twice, both after p1. p1 (t=3) expects node 1 once.
    nodes = [
        {"node": 1, "t": 0.0, "event": "up", "role": "peer"},
        {"node": 1, "t": 1.0, "event": "crash", "role": "peer"},
        {"node": 1, "t": 1.5, "event": "recover", "role": "peer"},
        {"node": 2, "t": 0.0, "event": "up", "role": "peer"},
    ]
    subs = [
        {"node": 1, "topic": "a", "t_start": 0.0, "t_end": None},
        {"node": 1, "topic": "a", "t_start": 2.0, "t_end": None},
        {"node": 2, "topic": "a", "t_start": 4.0, "t_end": None},
        {"node": 2, "topic": "a", "t_start": 5.0, "t_end": None},
    ]
    pubs = [
        {"pub_id": 1, "publisher": 1, "topic": "a", "t": 3.0, "size": 10},
        {"pub_id": 2, "publisher": 1, "topic": "a", "t": 4.5, "size": 10},
    ]
    tr = trace(spark, nodes=nodes, subscriptions=subs, publications=pubs)
    got = metrics.expected_pairs(tr.publications, tr.subscriptions, tr.nodes, tr.runs, **pairs_of)
    want = spark.createDataFrame(
        [("r1", 1, 1), ("r1", 2, 1), ("r1", 2, 2)], "run_id string, pub_id long, node long"
    )
    assertDataFrameEqual(got, want)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param({"content_based": True}, id="general"),
        pytest.param({"content_based": False}, id="by-topic"),
        pytest.param({"content_based": False, "small_since": True}, id="by-topic-broadcast"),
    ],
)
def test_per_publication_known_answers(
    spark: Any, pubsub: metrics.Trace, path: dict[str, bool]
) -> None:
    first = metrics.first_deliveries(pubsub.deliveries, pubsub.publications)
    got = metrics.per_publication(pubsub, first, **path)
    schema = got.schema
    rows = [
        # p1: expected {1}, receivers {1, 2}, one duplicate, latencies [0, .2],
        # last first delivery at node 2 with 1 hop, 4 payload messages: RMR 4/1 - 1;
        # 3 received (1→4 is lost), of which 2→3 is a false positive (3 neither
        # delivers p1 nor forwards it; 4 forwards it to 1)
        ("r1", 1, 1, "a", 1.0, 1, 1, 1.0, 2, 1, 0.1, 0.19, 0.198, 0.2, 0.5, 1, 4, 3.0, 1, 3),
        # p2: expected {1, 2, 4}, delivered {1, 2}, receivers {1, 2, 3}, latencies
        # [0, .1, .2], 3 payload messages: RMR 3/2 - 1; 2→4 a false positive
        ("r1", 2, 2, "a", 5.0, 3, 2, 2 / 3, 3, 0, 0.1, 0.19, 0.198, 0.2, 2 / 3, 1, 3, 0.5,
         1, 3),
        # p3: nobody expected, nobody received
        ("r1", 3, 1, "b", 2.0, 0, 0, None, 0, 0, None, None, None, None, None, None, 0, None,
         0, 0),
    ]  # fmt: skip
    want = spark.createDataFrame(rows, schema)
    assertDataFrameEqual(got, want)


def test_ties_in_time_are_broken_by_hops(spark: Any) -> None:
    """A first delivery's hops are the fewest among its deliveries at the first time, and the
    last delivery hop is the most hops among the first deliveries at the latest time: the
    (t, hops) order, whatever order the rows come in."""
    pubs = [{"pub_id": 1, "publisher": 1, "topic": "a", "t": 1.0, "size": 10}]
    deliveries = [
        {"pub_id": 1, "node": 2, "t": 1.5, "hops": 3},
        {"pub_id": 1, "node": 2, "t": 1.5, "hops": 2},  # the same time, fewer hops
        {"pub_id": 1, "node": 2, "t": 1.4, "hops": 5},  # earlier: this is the first
        {"pub_id": 1, "node": 3, "t": 1.6, "hops": 4},
        {"pub_id": 1, "node": 3, "t": 1.6, "hops": 1},
        {"pub_id": 1, "node": 4, "t": 1.6, "hops": 2},  # ties node 3's first delivery
        {"pub_id": 1, "node": 4, "t": 1.7, "hops": 0},  # a later copy: not a first delivery
    ]
    subs = [{"node": n, "topic": "a", "t_start": 0.0, "t_end": None} for n in (2, 3, 4)]
    nodes = [{"node": n, "t": 0.0, "event": "up", "role": "peer"} for n in (1, 2, 3, 4)]
    tr = trace(spark, nodes=nodes, subscriptions=subs, publications=pubs, deliveries=deliveries)
    first = metrics.first_deliveries(tr.deliveries, tr.publications)
    assertDataFrameEqual(
        first.select("node", "t", "hops", "copies"),
        spark.createDataFrame(
            [(2, 1.4, 5, 3), (3, 1.6, 1, 2), (4, 1.6, 2, 2)],
            "node long, t double, hops int, copies long",
        ),
    )
    for content_based in (True, False):
        row = (
            metrics.per_publication(tr, first, content_based=content_based)
            .select("expected", "delivered", "receivers", "duplicates", "ldh")
            .first()
        )
        assert row is not None and tuple(row) == (3, 3, 3, 4, 2), (content_based, row)


def test_expected_counts_by_topic_equal_the_pairs_counted(spark: Any) -> None:
    """The counts made without the pairs are the pairs counted, on a trace with churn,
    late and ended subscriptions, several topics and publications at a subscription's very
    start (``since <= t``: the subscriber counts)."""
    import random

    rng = random.Random(5)
    nodes, subs, pubs = [], [], []
    for n in range(30):
        nodes.append({"node": n, "t": 0.0, "event": "up", "role": "peer"})
        if rng.random() < 0.3:
            down = round(rng.uniform(1, 8), 1)
            nodes.append({"node": n, "t": down, "event": "crash", "role": "peer"})
            if rng.random() < 0.5:
                nodes.append({"node": n, "t": down + 1.0, "event": "recover", "role": "peer"})
        for topic in rng.sample("abc", rng.randint(0, 3)):
            start = float(rng.randint(0, 6))
            end = None if rng.random() < 0.7 else float(rng.randint(7, 12))
            subs.append({"node": n, "topic": topic, "t_start": start, "t_end": end})
    for p in range(40):
        pubs.append(
            {"pub_id": p, "publisher": 0, "topic": rng.choice("abcd"),
             "t": float(rng.randint(0, 9)), "size": 1}
        )  # fmt: skip
    tr = trace(spark, nodes=nodes, subscriptions=subs, publications=pubs)
    pairs = metrics.expected_pairs(
        tr.publications, tr.subscriptions, tr.nodes, tr.runs, content_based=True
    )
    want = {r["pub_id"]: r["count"] for r in pairs.groupBy("pub_id").count().collect()}
    since = metrics.subscribed_since(tr.subscriptions, tr.nodes, tr.runs)
    got = {
        r["pub_id"]: r["expected"]
        for r in metrics.expected_counts_by_topic(tr.publications, since).collect()
    }
    assert sum(want.values()) > 50, "the case should expect many pairs"
    assert got == {p: want.get(p, 0) for p in range(40)}


def test_order_violations_count_older_publications_delivered_after_newer(spark: Any) -> None:
    pubs = frame(
        spark,
        "publications",
        [{"pub_id": i, "publisher": 9, "topic": "a", "t": float(i)} for i in (1, 2, 3)],
    )
    deliveries = frame(
        spark,
        "deliveries",
        [
            {"pub_id": 2, "node": 5, "t": 2.1, "hops": 1},
            {"pub_id": 1, "node": 5, "t": 2.2, "hops": 1},  # older than 2, after it
            {"pub_id": 3, "node": 5, "t": 3.1, "hops": 1},
            {"pub_id": 1, "node": 6, "t": 1.1, "hops": 1},
            {"pub_id": 2, "node": 6, "t": 2.1, "hops": 1},
            {"pub_id": 2, "node": 6, "t": 2.5, "hops": 1},  # duplicate, not a violation
        ],
    )
    assertDataFrameEqual(
        metrics.order_violations(metrics.first_deliveries(deliveries, pubs), pubs),
        spark.createDataFrame([("r1", 1)], "run_id string, order_violations long"),
    )


def test_per_node_load_and_gini(spark: Any, pubsub: metrics.Trace) -> None:
    nodes = metrics.per_node(
        pubsub,
        metrics.message_totals(pubsub),
        metrics.first_deliveries(pubsub.deliveries, pubsub.publications),
    )
    got = nodes.select("node", "sent", "received", "load", "control_overhead", "deliveries")
    want = spark.createDataFrame(
        [(1, 2, 3, 5, 0.0, 2), (2, 4, 1, 5, 0.0, 2), (3, 1, 2, 3, 0.1, 1), (4, 1, 1, 2, 0.0, 0)],
        "node long, sent long, received long, load long, control_overhead double, deliveries long",
    )
    assertDataFrameEqual(got, want)
    # loads 2, 3, 5, 5: Gini = sum |xi - xj| / (2 n^2 mean) = 22 / 120
    summary = metrics.load_summary(nodes)
    assertDataFrameEqual(
        summary,
        spark.createDataFrame(
            [("r1", 5, 3.75, 22 / 120, 0.025)],
            "run_id string, load_max long, load_mean double, load_gini double, "
            "control_overhead double",
        ),
    )


def test_per_run_known_answers(spark: Any, pubsub: metrics.Trace) -> None:
    first = metrics.first_deliveries(pubsub.deliveries, pubsub.publications)
    totals = metrics.message_totals(pubsub)
    convergence = metrics.convergence_time(pubsub.checks)
    run = metrics.per_run(
        pubsub,
        publications=metrics.per_publication(pubsub, first),
        nodes=metrics.per_node(pubsub, totals, first),
        overlay=metrics.overlay_over_time(pubsub.snapshots),
        first=first,
        message_totals=totals,
        convergence=convergence,
        history=metrics.history_reliability(pubsub),
        config=metrics.config_requests(
            pubsub, convergence, spark.createDataFrame([], "run_id string, timeout_interval double")
        ),
    )
    got = run.select(
        "expected", "delivered", "reliability", "history_reliability", "duplicates",
        "latency_p50", "latency_max", "rmr_mean", "ldh_mean", "rmr_late", "ldh_late", "messages",
        "control_messages", "payload_messages", "load_gini", "degree_max", "convergence_time",
        "false_positive_rate",
    )  # fmt: skip
    # first-delivery latencies over the run: 0, .2, 0, .1, .2 -> p50 .1; false positives:
    # 2 of the 6 payload messages received (see the per-publication test); the later half by
    # publish time is p3 (t 2, no RMR or LDH: nobody received it) and p2 (t 5, RMR .5, LDH 1)
    want = spark.createDataFrame(
        [
            (
                4,
                3,
                0.75,
                4 / 6,
                1,
                0.1,
                0.2,
                1.75,
                1.0,
                0.5,
                1.0,
                8,
                1,
                7,
                22 / 120,
                None,
                None,
                1 / 3,
            )
        ],
        got.schema,
    )
    assertDataFrameEqual(got, want)


def test_content_filters_match_attributes(spark: Any) -> None:
    subs = frame(
        spark,
        "subscriptions",
        [
            {"node": 1, "filter": '{"price": {"lt": 10}}', "t_start": 0.0},
            {"node": 2, "filter": '{"symbol": "ACME"}', "t_start": 0.0},
            {"node": 3, "filter": "{}", "t_start": 0.0},
            {"node": 4, "filter": '{"price": {"ge": 5, "le": 20}, "symbol": {"in": ["ACME", '
             '"XYZ"]}}', "t_start": 0.0},
            {"node": 5, "filter": '{"name": {"prefix": "ab"}}', "t_start": 0.0},
            {"node": 6, "topic": "other", "filter": "{}", "t_start": 0.0},
        ],
    )  # fmt: skip
    pubs = frame(
        spark,
        "publications",
        [
            {"pub_id": 1, "publisher": 9, "attributes": '{"price": 3, "symbol": "ACME"}', "t": 1.0},
            {"pub_id": 2, "publisher": 9, "attributes": '{"price": 15, "symbol": "XYZ"}', "t": 1.0},
            {"pub_id": 3, "publisher": 9, "attributes": '{"name": "abc", "price": 25}', "t": 1.0},
        ],
    )
    got = metrics.matching_subscriptions(pubs, subs).select("pub_id", "node")
    # 15 >= 5 only as numbers ("15" < "5" as strings); node 6's topic is not the pubs' (null)
    want = spark.createDataFrame(
        [(1, 1), (1, 2), (1, 3), (2, 3), (3, 3), (2, 4), (3, 5)], "pub_id long, node long"
    )
    assertDataFrameEqual(got, want)


def test_overlay_degree_and_diameter_per_snapshot(spark: Any) -> None:
    def snap(t: float, node: int, layer: str, neighbors: list[int]) -> dict[str, Any]:
        return {"t": float(t), "node": node, "topic": "a", "layer": layer, "neighbors": neighbors}

    snapshots = frame(
        spark,
        "snapshots",
        [
            # t=0: ring 1-2-3-4-1 and a shortcut 1-3; node 2 also names 99, which is no vertex
            snap(0, 1, "ring", [2, 4]),
            snap(0, 1, "shortcut", [3]),
            snap(0, 2, "ring", [1, 3, 99]),
            snap(0, 3, "ring", [2, 4]),
            snap(0, 4, "ring", [3, 1]),
            snap(0, 0, "supervisor", []),
            # t=1: 1-2 and 3 alone: disconnected
            snap(1, 1, "ring", [2]),
            snap(1, 2, "ring", []),
            snap(1, 3, "ring", [3]),
        ],
    )
    # the supervisor's database is no overlay edge: the stack's spec says so (non_overlay_layers)
    got = metrics.overlay_over_time(snapshots, ["supervisor"]).drop("diameter_exact")
    want = spark.createDataFrame(
        [("r1", 0.0, "a", 4, 5, 3, 2.5, 2, True), ("r1", 1.0, "a", 3, 1, 1, 2 / 3, None, False)],
        got.schema,
    )
    assertDataFrameEqual(got, want)
    # without the exclusion, the supervisor is a fifth vertex with no edge: disconnected
    unfiltered = metrics.overlay_over_time(snapshots).where("t = 0").first()
    assert unfiltered is not None
    assert (unfiltered["nodes"], unfiltered["connected"]) == (5, False)
    assertDataFrameEqual(
        metrics.overlay_final(metrics.overlay_over_time(snapshots, ["supervisor"])),
        spark.createDataFrame(
            [("r1", 1, 2 / 3, None)],
            "run_id string, degree_max long, degree_mean double, diameter long",
        ),
    )


def test_diameter_estimate_on_large_graphs_is_flagged_and_never_above_exact() -> None:
    n = 40
    ring = [(i, (i + 1) % n) for i in range(n)]
    assert diameter(range(n), ring) == (20, True, True)
    value, connected, exact = diameter(range(n), ring, exact_limit=10)
    assert connected and not exact and value == 20  # double sweeps find a ring's diameter


def test_the_exact_diameter_is_the_largest_bfs_eccentricity() -> None:
    """The bit-parallel all-pairs BFS (graph._all_pairs_diameter) against a BFS from every
    vertex, on random graphs of 1 to 60 vertices, connected or not (seeded)."""
    import random

    from pubmesh.analysis.graph import _eccentricity

    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        n, p = rng.randint(1, 60), rng.random() * 0.3
        edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
        if rng.random() < 0.7:
            edges += [(i, i + 1) for i in range(n - 1)]
        value, connected, exact = diameter(range(n), edges)
        adjacency: dict[int, list[int]] = {v: [] for v in range(n)}
        for a, b in edges:
            adjacency[a].append(b)
            adjacency[b].append(a)
        eccentricities = [_eccentricity(v, adjacency) for v in range(n)]
        assert connected == (eccentricities[0][2] == n) and exact, (n, edges)
        if connected:
            assert value == max(e for e, _, _ in eccentricities), (n, edges, value)
            checked += 1
    assert checked > 200


def test_convergence_time_is_when_the_predicate_starts_holding_for_good(spark: Any) -> None:
    checks = frame(
        spark,
        "checks",
        [{"t": float(t), "predicate": "legitimate", "value": v}
         for t, v in enumerate([False, True, False, True, True])]
        + [{"run_id": "r2", "t": float(t), "predicate": "legitimate", "value": v}
           for t, v in enumerate([True, False])]
        + [{"run_id": "r3", "t": float(t), "predicate": "legitimate", "value": True}
           for t in range(3)],
    )  # fmt: skip
    assertDataFrameEqual(
        metrics.convergence_time(checks),
        spark.createDataFrame(
            [("r1", 3.0), ("r2", None), ("r3", 0.0)], "run_id string, convergence_time double"
        ),
    )


def test_supervisor_messages_and_config_requests(spark: Any) -> None:
    events = [
        {"t": 1.0, "node": 0, "kind": "supervisor.subscribe", "detail": '{"messages": 1}'},
        {"t": 1.5, "node": 0, "kind": "supervisor.subscribe", "detail": '{"messages": 1}'},
        {"t": 6.0, "node": 0, "kind": "supervisor.unsubscribe", "detail": '{"messages": 2}'},
        {"t": 6.5, "node": 0, "kind": "supervisor.unsubscribe_repeat", "detail": '{"messages": 5}'},
    ]
    request = {"src": 1, "dst": 0, "type": "ConfigurationRequest", "layer": "supervisor",
               "payload": False, "bytes": 20}  # fmt: skip
    t = trace(
        spark,
        events=events,
        checks=[{"t": float(x), "predicate": "legitimate", "value": x >= 3} for x in range(10)],
        subscriptions=[
            {"node": 1, "topic": "a", "t_start": 0.0},
            {"node": 2, "topic": "a", "t_start": 0.0},
        ],
        messages=[request | {"t_send": x, "t_recv": x + 0.01} for x in (1.0, 4.0, 5.0, 8.0)],
    )
    assertDataFrameEqual(
        metrics.event_metrics(t.events),
        spark.createDataFrame(
            [("r1", 1.0, 2.0, None, None, None, None)],  # no brokertree events: no counts
            "run_id string, supervisor_messages_per_subscribe double, "
            "supervisor_messages_per_unsubscribe double, stalls long, tagged long, "
            "safety_drops long, replayed long",
        ),
    )
    intervals = spark.createDataFrame([("r1", 1.0)], "run_id string, timeout_interval double")
    # converged at 3, window ends at 10: 7 timeout intervals, one topic, 3 requests after
    got = metrics.config_requests(t, metrics.convergence_time(t.checks), intervals)
    assertDataFrameEqual(
        got, spark.createDataFrame([("r1", 3 / 7)], "run_id string, config_requests double")
    )


def test_event_counts_per_run(spark: Any) -> None:
    """brokertree's stalls, tags and safety-net drops, counted from the events table."""
    events = [
        {"t": 1.0, "node": 3, "kind": "brokertree.stalled", "detail": "{}"},
        {"t": 1.5, "node": 4, "kind": "brokertree.stalled", "detail": "{}"},
        {"t": 2.0, "node": 9, "kind": "brokertree.tagged", "detail": "{}"},
        {"t": 2.5, "node": 9, "kind": "brokertree.suspect", "detail": "{}"},
        {"t": 3.0, "node": 5, "kind": "history.replayed", "detail": '{"pub_id": 1}'},
        {"t": 3.0, "node": 6, "kind": "history.replayed", "detail": '{"pub_id": 1}'},
    ]
    t = trace(spark, events=events)
    assertDataFrameEqual(
        metrics.event_metrics(t.events),
        spark.createDataFrame(
            [("r1", None, None, 2, 1, 0, 2)],  # no supervisor events: no means
            "run_id string, supervisor_messages_per_subscribe double, "
            "supervisor_messages_per_unsubscribe double, stalls long, tagged long, "
            "safety_drops long, replayed long",
        ),
    )
    assert metrics.event_metrics(trace(spark, events=events[3:4]).events).count() == 0


def test_counts_mode_traces_give_node_totals_but_no_rmr(spark: Any) -> None:
    runs = [{"stack": "gossip", "runtime": "sim", "nodes": 2, "seed": 1, "scenario": "",
             "schema_version": 1, "duration": 10.0, "messages_mode": "counts"}]  # fmt: skip
    counts = [
        {"second": 0, "node": 1, "type": "Gossip", "layer": "broadcast", "payload": True,
         "sent": 5, "received": 1, "lost": 0, "bytes_sent": 500},
        {"second": 1, "node": 1, "type": "Gossip", "layer": "broadcast", "payload": True,
         "sent": 2, "received": 0, "lost": 0, "bytes_sent": 200},
        {"second": 1, "node": 2, "type": "IHave", "layer": "broadcast", "payload": False,
         "sent": 3, "received": 7, "lost": 1, "bytes_sent": 30},
    ]  # fmt: skip
    t = trace(
        spark,
        runs=runs,
        message_counts=counts,
        publications=[{"pub_id": 1, "publisher": 1, "topic": "a", "t": 0.5}],
        deliveries=[
            {"pub_id": 1, "node": 1, "t": 0.5, "hops": 0},
            {"pub_id": 1, "node": 2, "t": 0.6, "hops": 1},
        ],
    )
    totals = metrics.message_totals(t).select("node", "type", "sent", "received", "bytes_sent")
    assertDataFrameEqual(
        totals,
        spark.createDataFrame(
            [(1, "Gossip", 7, 1, 700), (2, "IHave", 3, 7, 30)],
            "node long, type string, sent long, received long, bytes_sent long",
        ),
    )
    first = metrics.first_deliveries(t.deliveries, t.publications)
    pubs = metrics.per_publication(t, first)
    row = pubs.select("receivers", "payload_messages", "rmr", "false_positives").first()
    assert row is not None and tuple(row) == (2, None, None, None)
    # the report says so rather than failing: one section naming the run and the metrics
    from pubmesh.analysis.job import counts_note

    note = counts_note(t)
    assert note is not None
    heading, text = note
    assert "cannot give" in heading and "rmr_mean" in text and "false-positive" in text
    (run_id,) = [r["run_id"] for r in t.runs.collect()]
    assert run_id in text


def test_edge_filters_are_read_from_the_last_snapshot(spark: Any) -> None:
    """filter_conjunctions_mean/max: subscription conjunctions per out-edge at each run's
    last snapshot; a snapshot without ``filters`` (another stack) adds nothing."""

    def snap(run: str, t: float, node: int, state: str) -> dict[str, Any]:
        return {"run_id": run, "t": t, "node": node, "topic": "", "layer": "ring",
                "neighbors": [], "state": state}  # fmt: skip

    snapshots = frame(
        spark,
        "snapshots",
        [
            snap("r1", 1.0, 1, '{"filters": {"2": 100, "3": 1}}'),  # superseded at t = 2
            snap("r1", 2.0, 1, '{"filters": {"2": 4, "3": 1}}'),
            snap("r1", 2.0, 2, '{"filters": {"1": 7}}'),
            snap("r1", 2.0, 3, '{"filters": {}}'),
            snap("r2", 5.0, 1, '{"active": [2]}'),
        ],
    )
    assertDataFrameEqual(
        metrics.edge_filters(snapshots),
        spark.createDataFrame(
            [("r1", 4.0, 7)],
            "run_id string, filter_conjunctions_mean double, filter_conjunctions_max long",
        ),
    )


def test_reliability_plot_skips_time_buckets_nobody_expected(spark: Any) -> None:
    """A content-based run can publish for a while nothing any subscriber's filter matches:
    that bucket has no reliability (it was a division by zero under ANSI SQL and failed the
    whole report, found by `pubmesh sweep scenarios/grids/brokertree_acks.toml`)."""
    from pubmesh.analysis.job import compute, make_plots, plot_data

    t = trace(
        spark,
        subscriptions=[{"node": 1, "topic": "a", "t_start": 0.0, "filter": '{"x": 1}'}],
        publications=[
            {"pub_id": 1, "publisher": 2, "topic": "a", "t": 1.0, "attributes": '{"x": 1}'},
            {"pub_id": 2, "publisher": 2, "topic": "a", "t": 9.0, "attributes": '{"x": 2}'},
        ],
        deliveries=[{"pub_id": 1, "node": 1, "t": 1.1, "hops": 1}],
        nodes=[{"node": n, "t": 0.0, "event": "up", "role": "peer"} for n in (1, 2)],
    )
    figures = make_plots(plot_data(t, compute(spark, t)))
    assert "Reliability by publish time" in figures


def test_an_analysis_shuffles_into_partitions_by_input_size_and_restores_the_setting(
    spark: Any,
) -> None:
    """A small trace's shuffles get one partition (each extra one is a task in every stage);
    a large one keeps the session's setting, which is restored after the analysis."""
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key)
    with shuffle_partitions(spark, 4_000_000) as small:
        assert (small, spark.conf.get(key)) == (1, "1")
    with shuffle_partitions(spark, 3 * BYTES_PER_PARTITION + 1) as three:
        assert three == min(4, int(before))
    with shuffle_partitions(spark, 10**13) as large:
        assert large == int(before)
    assert spark.conf.get(key) == before


def test_a_small_analysis_plans_without_adaptive_execution_and_restores_the_setting(
    spark: Any,
) -> None:
    """Up to SMALL_INPUT_BYTES the plans are static (adaptive execution's stage-by-stage jobs
    cost a small trace a sixth of its time); a larger input keeps the session's setting."""
    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key)
    assert before == "true"
    with static_plans(spark, SMALL_INPUT_BYTES) as small:
        assert (small, spark.conf.get(key)) == (True, "false")
    assert spark.conf.get(key) == before
    with static_plans(spark, SMALL_INPUT_BYTES + 1) as large:
        assert (large, spark.conf.get(key)) == (False, before)
    assert spark.conf.get(key) == before
