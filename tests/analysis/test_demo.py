"""`pubmesh demo` (the job behind `make demo`) runs end to end: every stack × failed fractions
as Spark tasks, one Spark analysis, `report.html` and the Henriques & Pamplona-shaped table.

The test sweeps two fractions (``--fractions 0,0.5``), the fewest that still check what it
names: 0% for Table 1's "no failures, every expected delivery made", 50% for the report's
opening sentence ("With 50% of the nodes failed"), every stack at both, the tables printed and
the report written and rendered. The default grid's 10% and 85% are ``make demo``'s (its
fractions are the same code path: ``write_grid`` writes whichever it is given; the default is
checked below). The four-fraction grid cost twice the simulations and analysis.

"Every stack" is every stack whose spec names a demo scenario, the test suite's tiny stack
(tests/tinystack) included: the demo learns of it from its spec alone."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pubmesh.analysis import demo
from pubmesh.analysis.demo import demo_scenarios
from pubmesh.cli import main
from support.browser import assert_renders

#: the test's grid: the fewest fractions that check what the demo claims (module docstring)
FRACTIONS = (0.0, 0.5)


def test_the_default_grid_is_the_papers_four_fractions(tmp_path: Path) -> None:
    """``make demo`` (no ``--fractions``) sweeps 0/10/50/85% at three seeds, one with
    ``--quick``; a bad ``--fractions`` is one line and exit 2, before any work."""
    assert demo.FRACTIONS == (0.0, 0.1, 0.5, 0.85)
    text = demo.write_grid(tmp_path, [1, 2, 3]).read_text()
    assert '"faults.0.fraction" = [0.0, 0.1, 0.5, 0.85]' in text and "seeds = [1, 2, 3]" in text
    for given, words in [("0,1.5", "1.5 is not a fraction"), ("x", "as numbers"),
                         ("0,0", "given twice")]:  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "pubmesh", "demo", "--fractions", given, "--out",
             str(tmp_path / "o")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert words in done.stderr and not (tmp_path / "o").exists(), done.stderr


# a hang guard, not a bound: ~2 min alone, longer beside the suite's other workers
@pytest.mark.timeout(1500)
def test_demo_quick_runs_every_stack_and_prints_the_papers_tables(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command as a user types it, run in this process (``pubmesh.cli.main``), so that
    it finds the suite's warm Spark session as its active one (``get_session``) instead of
    starting and warming a JVM of its own (one JVM for the suite's analyses)."""
    code = main(
        ["demo", "--quick", "--quiet", "--out", str(tmp_path),
         "--fractions", ",".join(str(f) for f in FRACTIONS)]
    )  # fmt: skip
    captured = capsys.readouterr()
    done = SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)
    assert done.returncode == 0, done.stderr[-3000:]
    stacks = sorted(demo_scenarios())
    assert stacks == ["brokertree", "chord", "clique", "d2g", "gossip", "skipring", "tiny"]
    for word in ("expected", "received", "reliability", "eager", "lazy", "membership", "RMR",
                 "LDH", "0%", "50%", *stacks):  # fmt: skip
        assert word in done.stdout, done.stdout
    grid = (tmp_path / "grid.toml").read_text()
    assert '"faults.0.fraction" = [0.0, 0.5]' in grid, grid
    # what "failed" means for a stack whose demo crashes nodes of a role (brokertree: brokers)
    assert "brokertree: of its brokers" in " ".join(done.stdout.split()), done.stdout
    tasks = json.loads((tmp_path / "tasks.json").read_text())
    assert len(tasks) == len(FRACTIONS) * len(stacks) and all(t["ok"] for t in tasks), tasks
    report = (tmp_path / "report.html").read_text()
    assert "Tables 1-3 of Henriques &amp; Pamplona" in report
    assert "<figure class='chart'" not in report
    # as a reader opens it: headless Chromium, offline, every chart drawn, no JavaScript error;
    # the comparison comes first: a sentence naming a stack, then the interactive charts
    shown = assert_renders(tmp_path / "report.html", tmp_path / "demo.png", min_charts=5)
    assert "Tables 1-3 of Henriques & Pamplona" in shown.text
    text = " ".join(shown.text.split())
    table = text.index("Tables 1-3 of Henriques & Pamplona")
    assert text.index("Which stack delivers what") < table
    assert "With 50% of the nodes failed," in text and "delivered" in text
    charts = {str(c["label"]) for c in shown.charts if c["kind"] == "svg"}
    compared = {c for c in charts if c.startswith("compare-")}
    assert len(compared) >= 5, shown.charts  # the comparison's charts, above the rest
    assert len(charts - compared) >= 20, shown.charts  # "All plots", opened: all drew
    assert "/scenarios/" not in text  # scenario names, never absolute paths
    assert (tmp_path / "report.html").stat().st_size < 10_000_000
    summary = json.loads((tmp_path / "summary.json").read_text())
    # the tiny stack, from outside the package, analysed like the others
    # (tests/proto/test_tiny_stack runs its simulation alone): the hub is spared by fraction
    # faults, so every live subscriber gets all 20 publications once at every fraction, and each run
    # has its charts
    tiny = [r for r in summary["runs"] if r["stack"] == "tiny"]
    assert len(tiny) == len(FRACTIONS), summary["runs"]
    for run in tiny:
        assert run["publications"] == 20 and run["expected"] > 0, run
        assert run["reliability"] == 1.0 and run["duplicates"] == 0, run
    # each run has its charts, named in the legends without its id's hash: a name per fraction
    # (the same scenario and seed, told apart by their faults), each in three charts or more
    bare = {re.sub(r"-[0-9a-f]{8}$", "", run["run_id"]) for run in tiny}
    assert len(bare) == 1, bare
    names = Counter(re.findall(r'"name":"(' + re.escape(bare.pop()) + r'[^"]*)"', report))
    assert len(names) == len(FRACTIONS) and min(names.values()) >= 3, names
    by_point = {(r["scenario"], r["faults_0_fraction"]): r for r in summary["comparison"]}
    gossip_clean = next(v for k, v in by_point.items() if "paper004" in k[0] and k[1] == "0.0")
    # Henriques & Pamplona Table 1: no failures, every expected delivery made
    assert gossip_clean["reliability_mean"] == 1.0
    # the table's figures are the traces': eager = payload (Gossip) messages of the
    # no-failure gossip run, straight from its Parquet partition
    point = next(
        r["point"] for r in summary["comparison"]
        if "paper004" in r["scenario"] and r["faults_0_fraction"] == "0.0"
    )  # fmt: skip
    [run_id] = [t["run_id"] for t in tasks if t["point"] == point]
    messages = pq.read_table(tmp_path / "traces" / "messages" / f"run_id={run_id}")
    eager = pc.sum(pc.equal(messages["type"], "Gossip")).as_py()
    [row] = [r for r in summary["paper_table"] if r["stack"] == "gossip" and r["fraction"] == 0]
    assert row["eager"] == eager > 0
    assert f"{eager:,}" in done.stdout
