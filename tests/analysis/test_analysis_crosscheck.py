"""Cross-check: the Spark pipeline's run metrics against an independent DuckDB computation
on real simulated traces (a gossip run with half the nodes crashed, a skipring run with a
tenth crashed), analysed together in one `analyze` call as the CLI does."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pubmesh.analysis.job import analyze
from pubmesh.scenario.model import load_scenario
from pubmesh.sim.runner import run_scenario

ROOT = Path(__file__).resolve().parents[2]
RUNS = [
    ("paper004_fail50.toml", 1, []),
    ("skipring_demo.toml", 2, ["faults.0.fraction=0.1"]),
]


def duckdb_run_metrics(run_dir: Path) -> dict[str, Any]:
    """The run metrics of docs/design.md, written again from the definitions as DuckDB SQL."""
    db = duckdb.connect()
    for table in ("runs", "nodes", "subscriptions", "publications", "deliveries", "messages",
                  "snapshots", "checks", "events"):  # fmt: skip
        db.execute(
            f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{run_dir / table}/*.parquet')"
        )
    sql = """
    WITH ev AS (
      SELECT node, t, event, lead(t) OVER (PARTITION BY node ORDER BY t, event) AS t_next
      FROM nodes),
    life AS (SELECT node, t AS t_up, coalesce(t_next, 'inf'::DOUBLE) AS t_down
             FROM ev WHERE event IN ('up', 'recover')),
    win AS (SELECT duration AS t_end_window FROM runs),
    expected AS (
      SELECT DISTINCT p.pub_id, s.node
      FROM publications p JOIN subscriptions s ON s.topic = p.topic, win
      JOIN life l ON l.node = s.node
      WHERE s.t_start <= p.t AND (s.t_end IS NULL OR s.t_end >= win.t_end_window)
        AND l.t_up <= p.t AND l.t_down >= win.t_end_window),
    first AS (
      SELECT d.pub_id, d.node, min(d.t) AS t, arg_min(d.hops, d.t) AS hops, count(*) AS copies,
             min(d.t) - any_value(p.t) AS latency
      FROM deliveries d JOIN publications p USING (pub_id) GROUP BY d.pub_id, d.node),
    per_pub AS (
      SELECT p.pub_id,
        row_number() OVER (ORDER BY p.t, p.pub_id) AS rank,
        count(*) OVER () AS n,
        (SELECT count(*) FROM first f WHERE f.pub_id = p.pub_id) AS receivers,
        (SELECT arg_max(f.hops, (f.t, f.hops)) FROM first f WHERE f.pub_id = p.pub_id) AS ldh,
        (SELECT count(*) FROM messages m WHERE m.payload AND m.pub_id = p.pub_id) AS payload
      FROM publications p)
    SELECT
      (SELECT count(*) FROM expected) AS expected,
      (SELECT count(*) FROM expected e JOIN first f USING (pub_id, node)) AS delivered,
      (SELECT sum(copies - 1) FROM first) AS duplicates,
      (SELECT quantile_cont(latency, 0.5) FROM first) AS latency_p50,
      (SELECT quantile_cont(latency, 0.99) FROM first) AS latency_p99,
      (SELECT max(latency) FROM first) AS latency_max,
      (SELECT avg(payload / (receivers - 1) - 1) FROM per_pub WHERE receivers >= 2) AS rmr_mean,
      (SELECT avg(ldh) FROM per_pub) AS ldh_mean,
      (SELECT avg(payload / (receivers - 1) - 1) FROM per_pub
       WHERE receivers >= 2 AND rank > n // 2) AS rmr_late,
      (SELECT avg(ldh) FROM per_pub WHERE rank > n // 2) AS ldh_late,
      (SELECT count(*) FROM messages) AS messages
    """
    row = db.execute(sql).fetchone()
    assert row is not None
    names = [d[0] for d in db.description]
    out = dict(zip(names, row, strict=True))
    out["reliability"] = out["delivered"] / out["expected"]
    # load: messages in (received) + out (sent) per node of the nodes table; Gini by its
    # mean-absolute-difference definition
    loads = [
        r[0]
        for r in db.execute(
            """
            WITH n AS (SELECT DISTINCT node FROM nodes),
            s AS (SELECT src AS node, count(*) AS c FROM messages GROUP BY src),
            r AS (SELECT dst AS node, count(*) AS c FROM messages
                  WHERE t_recv IS NOT NULL GROUP BY dst)
            SELECT coalesce(s.c, 0) + coalesce(r.c, 0)
            FROM n LEFT JOIN s USING (node) LEFT JOIN r USING (node)"""
        ).fetchall()
    ]
    mean = sum(loads) / len(loads)
    out["load_max"] = max(loads)
    out["load_mean"] = mean
    out["load_gini"] = sum(abs(a - b) for a in loads for b in loads) / (2 * len(loads) ** 2 * mean)
    # degree at the last snapshot: undirected edges between snapshot vertices, all layers but
    # the supervisor's, per topic
    degree = db.execute(
        """
        WITH last AS (SELECT max(t) AS t FROM snapshots),
        v AS (SELECT DISTINCT topic, node FROM snapshots, last
              WHERE snapshots.t = last.t AND layer <> 'supervisor'),
        refs AS (SELECT topic, node, unnest(neighbors) AS nb FROM snapshots, last
                 WHERE snapshots.t = last.t AND layer <> 'supervisor'),
        e AS (SELECT DISTINCT r.topic, least(r.node, r.nb) AS a, greatest(r.node, r.nb) AS b
              FROM refs r JOIN v ON v.topic = r.topic AND v.node = r.nb WHERE r.node <> r.nb),
        deg AS (SELECT v.topic, v.node,
                  (SELECT count(*) FROM e
                   WHERE e.topic = v.topic AND (e.a = v.node OR e.b = v.node)) AS d FROM v)
        SELECT max(d), avg(d) FROM deg"""
    ).fetchone()
    assert degree is not None
    out["degree_max"], out["degree_mean"] = degree
    checks = db.execute("SELECT t, value FROM checks ORDER BY t").fetchall()
    bad = [t for t, ok in checks if not ok]
    good = [t for t, ok in checks if ok and (not bad or t > max(bad))]
    out["convergence_time"] = (min(good) if good else None) if checks else None
    sup = db.execute(
        """SELECT avg(CAST(json_extract(detail, '$.messages') AS DOUBLE))
           FROM events WHERE kind = 'supervisor.subscribe'"""
    ).fetchone()
    out["supervisor_messages_per_subscribe"] = sup[0] if sup else None
    return out


# one worker runs this module (it reads the `spark` fixture: tests/conftest.py), so its
# expensive fixture is built once


# session scope, not module: a module fixture is torn down whenever the worker runs another
# module's test in between, and under xdist that rebuilt it (~220 s) within one run
@pytest.fixture(scope="session")
def analysed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("crosscheck")
    dirs = []
    for name, seed, sets in RUNS:
        scenario = load_scenario(ROOT / "scenarios" / name, [*sets, f"run.seed={seed}"])
        run_scenario(scenario, base / name)
        dirs.append(base / name)
    analysis = analyze(spark, dirs, base / "analysis")
    return base, {row["stack"]: row for row in analysis.rows}


@pytest.mark.parametrize("name,seed,sets", RUNS)
def test_spark_and_duckdb_agree_on_run_metrics(
    analysed: tuple[Path, dict[str, Any]], name: str, seed: int, sets: list[str]
) -> None:
    base, rows = analysed
    run_dir = base / name
    stack = "skipring" if name.startswith("skipring") else "gossip"
    spark_row = rows[stack]
    duck = duckdb_run_metrics(run_dir)
    replay = f"pubmesh sim scenarios/{name} --seed {seed} " + " ".join(f"--set {s}" for s in sets)
    assert duck["expected"] > 0, replay
    for key, want in duck.items():
        got = spark_row[key]
        if want is None or got is None:
            assert got == want, f"{key}: spark {got} duckdb {want} ({replay})"
        else:
            assert math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=1e-12), (
                f"{key}: spark {got} duckdb {want} ({replay})"
            )
    if stack == "skipring":
        # the pipeline's skipring metrics exist and have the paper's values
        assert spark_row["convergence_time"] is not None, replay
        assert spark_row["supervisor_messages_per_subscribe"] == 1.0, replay
        assert spark_row["history_reliability"] == 1.0, replay


def test_analysis_writes_metrics_summary_and_report(
    analysed: tuple[Path, dict[str, Any]],
) -> None:
    base, _ = analysed
    out = base / "analysis"
    for table in ("publications", "nodes", "node_messages", "overlay", "messages_per_second",
                  "runs"):  # fmt: skip
        assert list((out / "metrics" / table).glob("*.parquet")), table
    report = (out / "report.html").read_text()
    # the latency CDF, reliability, load, degree and messages-per-second charts, interactive
    assert report.count('class="plotly-graph-div"') == 5, "five charts"
    captions = ("Latency CDF", "Reliability of publications by publish time", "Per-node load",
                "Degree distribution", "Messages per second by type")  # fmt: skip
    for caption in captions:
        assert caption in report
    charts = ("latency-cdf", "reliability-by-publish-time", "per-node-load",
              "degree-distribution-last-snapshot", "messages-per-second-by-type")  # fmt: skip
    for chart in charts:
        assert f'id="fig-{chart}"' in report, chart
    assert "history_reliability" in (out / "summary.json").read_text()
