"""The report's parts that need no Spark: the sentence a report opens
with, the runs' names in legends, what each column means, and charts that stay readable
when runs differ in size or a trace has many message types."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from pubmesh.analysis import charts
from pubmesh.analysis.job import run_labels
from pubmesh.analysis.report import ANCHORS, GLOSSARY, RUN_TABLE, html_table, run_headline

ROOT = Path(__file__).resolve().parents[2]


def test_one_run_opens_with_what_it_delivered_how_fast_and_at_what_cost() -> None:
    row = {
        "run_id": "gossip_crash-gossip-s1-0123abcd", "stack": "gossip", "nodes": 200,
        "publications": 100, "reliability": 0.99944, "latency_p50": 0.155,
        "latency_p99": 0.612, "messages": 240_000, "delivered": 20_000,
    }  # fmt: skip
    faults = {row["run_id"]: "50% crashed at 40 s"}
    assert run_headline([row], faults, {}) == (
        "200 gossip nodes, 50% crashed at 40 s: 99.94% of the expected deliveries made, "
        "latency p50 155 ms (p99 612 ms), 12.0 messages per delivery."
    )
    silent = {**row, "reliability": None}
    assert run_headline([silent], {}, {}) == (
        "200 gossip nodes: no subscriber expected any of its 100 publications."
    )


def test_several_runs_open_with_their_range_and_the_weakest_named() -> None:
    rows = [
        {"run_id": "a-1", "stack": "gossip", "reliability": 1.0, "latency_p50": 0.02,
         "messages": 100, "delivered": 50},
        {"run_id": "b-2", "stack": "chord", "reliability": 0.9, "latency_p50": 0.04,
         "messages": 300, "delivered": 50},
    ]  # fmt: skip
    text = run_headline(rows, {"b-2": "25% crashed at 5 s"}, {"b-2": "net_small-chord-s1"})
    assert text == (
        "2 runs (chord, gossip): reliability from 90.00% (net_small-chord-s1, 25% crashed "
        "at 5 s) to 100.00%, latency p50 20 ms to 40 ms, 2.0 to 6.0 messages per delivery."
    )


def test_legends_name_runs_without_their_hash_and_tell_twins_apart() -> None:
    ids = ["p-gossip-s1-0000aaaa", "p-gossip-s1-1111bbbb", "q-chord-s2-2222cccc"]
    hints = {ids[0]: "47% crashed at 20 s", ids[1]: "82% crashed at 20 s"}
    assert run_labels(ids, hints) == {
        ids[0]: "p-gossip-s1, 47% crashed at 20 s",
        ids[1]: "p-gossip-s1, 82% crashed at 20 s",
        ids[2]: "q-chord-s2",
    }
    # nothing tells them apart: the whole ids
    assert run_labels(ids[:2]) == {ids[0]: ids[0], ids[1]: ids[1]}


def test_every_run_table_column_says_what_it_measures_and_links_its_definition() -> None:
    glossary = (ROOT / "docs" / "metrics.md").read_text()
    for key, _, _ in RUN_TABLE:
        assert GLOSSARY.get(key), key
        anchor = ANCHORS.get(key, key)
        assert f'id="{anchor}"' in glossary, f"docs/metrics.md has no entry for {key}"
    table = html_table([{"run_id": "r", "reliability": 1.0}], [("reliability", "rel", "{}")])
    heading = r"<th title='delivered ÷ expected[^']*\(docs/metrics.md#reliability\)'>"
    assert re.search(heading, table), table


def test_runs_of_different_sizes_are_compared_by_share_not_count() -> None:
    frame = pd.DataFrame(
        {"run_id": ["big", "big", "small"], "degree": [2, 3, 2], "count": [900, 100, 10]}
    )
    fig = charts.run_histogram(
        frame, "degree", "count", {"big": "gossip", "small": "chord"}, title="t", xlabel="x"
    )
    shares = {trace.name: list(trace.y) for trace in fig.data}
    assert shares == {"big": [0.9, 0.1], "small": [1.0]}
    assert fig.layout.yaxis.tickformat == ".0%"
    one = charts.run_histogram(frame[frame.run_id == "big"], "degree", "count", {}, title="t",
                               xlabel="x")  # fmt: skip
    assert list(one.data[0].y) == [900, 100]  # one run: counts


def test_many_message_types_get_a_colour_each_and_the_rest_is_other() -> None:
    frame = pd.DataFrame(
        [{"second": s, "type": f"T{k:02d}", "sent": 100 - k} for s in range(3) for k in range(15)]
    )
    fig = charts.messages_per_second(frame)
    names = [trace.name for trace in fig.data]
    colours = [trace.line.color for trace in fig.data]
    assert len(names) == charts.TOP_TYPES and names[-1] == "other"
    assert len(set(colours)) == len(colours)  # no two types share a colour
    assert set(names[:-1]) == {f"T{k:02d}" for k in range(charts.TOP_TYPES - 1)}  # the busiest
    other = fig.data[-1]
    assert list(other.y) == [sum(100 - k for k in range(charts.TOP_TYPES - 1, 15))] * 3


def test_a_sweep_opens_with_what_was_swept_and_where_the_extremes_are(tmp_path: Path) -> None:
    from pubmesh.analysis.sweep import column_name, load_grid, sweep_headline

    grid_file = tmp_path / "g.toml"
    grid_file.write_text(
        f'seeds = [1, 2]\nbase = "{ROOT / "scenarios" / "paper004_fail50.toml"}"\n'
        '[grid]\n"faults.0.fraction" = [0.0, 0.5]\n'
    )
    grid = load_grid(grid_file)
    key = column_name("faults.0.fraction")
    comparison = [
        {key: "0.0", "reliability_mean": 1.0, "latency_p50_mean": 0.030},
        {key: "0.5", "reliability_mean": 0.9, "latency_p50_mean": 0.020},
    ]
    assert sweep_headline(grid, comparison) == (
        "4 runs (2 points × 2 seeds; failed = 0%, 50%): reliability from 90.00% "
        "(failed = 50%) to 100.00% (failed = 0%); latency p50 from "
        "20 ms (failed = 50%) to 30 ms (failed = 0%)."
    )
    same = [{**row, "reliability_mean": 1.0} for row in comparison]
    assert "reliability 100.00% at every point" in sweep_headline(grid, same)
    # a failed task is not counted among the runs the means are over
    assert sweep_headline(grid, comparison, failed=1).startswith(
        "3 runs (2 points × 2 seeds; failed = 0%, 50%; 1 of 4 failed): "
    )
